-- A tenant adds a project with a task (its id from the project's), renames
-- a task (the BEFORE UPDATE trigger counts it), and drops its oldest added
-- project but the newest, with its tasks first (the key has no cascade).
INSERT INTO projects (tenant_id, name) VALUES (@k, 'added');
INSERT INTO tasks (id, tenant_id, project_id, title) VALUES (LAST_INSERT_ID() * 10 + 1, @k, LAST_INSERT_ID(), 'new');
UPDATE tasks SET title = 'renamed' WHERE tenant_id = @k AND id = @k * 1000 + 11;
SET @p = (SELECT MIN(id) FROM projects WHERE tenant_id = @k AND name = 'added' AND id < (SELECT MAX(id) FROM projects WHERE tenant_id = @k AND name = 'added'));
DELETE FROM tasks WHERE tenant_id = @k AND project_id = @p;
DELETE FROM projects WHERE tenant_id = @k AND id = @p;
