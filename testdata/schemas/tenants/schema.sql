-- A multi-tenant SaaS schema sharded by tenant (a LIST map, one point per
-- tenant): a tenant table keyed by tenant_id, children keyed by tenant_id
-- (projects, with an AUTO_INCREMENT id), a grandchild that references its
-- project by the project's own id only (tasks.project_id -> projects.id:
-- a key move must see on the rows that every task's project moves with
-- it), a global table (plans) every shard holds whole, a sharded -> global
-- key, a trigger that keeps each tenant's project count (it must not fire
-- on shardctl's copies), a BEFORE UPDATE trigger, and a view.
-- Tenants' sizes are skewed: every tenth tenant has ten times the projects.

CREATE TABLE plans (
  plan_id INT NOT NULL PRIMARY KEY,
  name VARCHAR(20) NOT NULL,
  max_projects INT NOT NULL
) ENGINE=InnoDB;
INSERT INTO plans VALUES (1, 'free', 3), (2, 'team', 50), (3, 'enterprise', 100000);

CREATE TABLE tenants (
  tenant_id INT NOT NULL PRIMARY KEY,
  name VARCHAR(40) NOT NULL,
  plan_id INT NOT NULL,
  project_count INT NOT NULL DEFAULT 0,
  KEY plan (plan_id),
  CONSTRAINT fk_tenant_plan FOREIGN KEY (plan_id) REFERENCES plans (plan_id)
) ENGINE=InnoDB;
INSERT INTO tenants (tenant_id, name, plan_id) SELECT emp_no, CONCAT(first_name, ' ', last_name, ' Ltd'), 1 + emp_no % 3 FROM employees;

-- Ids are tenant_id * 100 + n at first; each shard's counter then starts
-- far above them, and a lower shard's above a higher one's, so shards never
-- issue the same id before a move joins them (as key_shapes' tickets).
CREATE TABLE projects (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  tenant_id INT NOT NULL,
  name VARCHAR(40) NOT NULL,
  KEY tenant (tenant_id),
  CONSTRAINT fk_project_tenant FOREIGN KEY (tenant_id) REFERENCES tenants (tenant_id)
) ENGINE=InnoDB;
INSERT INTO projects (id, tenant_id, name) SELECT tenant_id * 100 + 1, tenant_id, 'first' FROM tenants;
INSERT INTO projects (id, tenant_id, name)
  SELECT t.tenant_id * 100 + n.n, t.tenant_id, 'big' FROM tenants t
  JOIN (SELECT 2 n UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6
        UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10) n
  WHERE t.tenant_id % 10 = 1;
UPDATE tenants t SET project_count = (SELECT COUNT(*) FROM projects p WHERE p.tenant_id = t.tenant_id);
SET @raise = CONCAT('ALTER TABLE projects AUTO_INCREMENT = ', 1000000000000000 - (SELECT MIN(tenant_id) FROM tenants) * 1000);
PREPARE raise FROM @raise;
EXECUTE raise;
DEALLOCATE PREPARE raise;

-- Task ids are their project's id * 10 + n: unique wherever the project's is.
CREATE TABLE tasks (
  id BIGINT NOT NULL PRIMARY KEY,
  tenant_id INT NOT NULL,
  project_id BIGINT NOT NULL,
  title VARCHAR(40) NOT NULL,
  version INT NOT NULL DEFAULT 0,
  KEY tenant (tenant_id),
  KEY project (project_id),
  CONSTRAINT fk_task_project FOREIGN KEY (project_id) REFERENCES projects (id)
) ENGINE=InnoDB;
INSERT INTO tasks (id, tenant_id, project_id, title) SELECT id * 10 + 1, tenant_id, id, 'write the spec' FROM projects;
INSERT INTO tasks (id, tenant_id, project_id, title) SELECT id * 10 + 2, tenant_id, id, 'ship it' FROM projects WHERE id % 2 = 1;

DELIMITER ;;
CREATE TRIGGER projects_ai AFTER INSERT ON projects FOR EACH ROW
  UPDATE tenants SET project_count = project_count + 1 WHERE tenant_id = NEW.tenant_id;;
CREATE TRIGGER projects_ad AFTER DELETE ON projects FOR EACH ROW
  UPDATE tenants SET project_count = project_count - 1 WHERE tenant_id = OLD.tenant_id;;
CREATE TRIGGER tasks_bu BEFORE UPDATE ON tasks FOR EACH ROW
  SET NEW.version = OLD.version + 1;;
DELIMITER ;

CREATE VIEW tenant_summary AS
  SELECT t.tenant_id, t.name, pl.name AS plan, COUNT(DISTINCT p.id) AS projects, COUNT(k.id) AS tasks
  FROM tenants t JOIN plans pl ON pl.plan_id = t.plan_id
  LEFT JOIN projects p ON p.tenant_id = t.tenant_id
  LEFT JOIN tasks k ON k.project_id = p.id
  GROUP BY t.tenant_id, t.name, pl.name;
