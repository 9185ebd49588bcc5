-- every task's project belongs to the same tenant (no child left on another shard than its parent)
SELECT COUNT(*) = 0 FROM tasks k JOIN projects p ON p.id = k.project_id WHERE k.tenant_id <> p.tenant_id;
-- the trigger kept each tenant's project count exactly (a trigger that fired on a copied row counts twice)
SELECT COUNT(*) = 0 FROM tenants t WHERE t.project_count <> (SELECT COUNT(*) FROM projects p WHERE p.tenant_id = t.tenant_id);
-- every tenant kept its seeded projects and tasks (nothing lost on the way)
SELECT COUNT(*) = 0 FROM tenants t WHERE (SELECT COUNT(*) FROM projects p WHERE p.tenant_id = t.tenant_id AND p.name <> 'added') <> IF(t.tenant_id % 10 = 1, 10, 1);
SELECT COUNT(*) = 0 FROM projects p WHERE p.name <> 'added' AND (SELECT COUNT(*) FROM tasks k WHERE k.project_id = p.id) <> IF(p.id % 2 = 1, 2, 1);
-- the view answers for every tenant
SELECT (SELECT COUNT(*) FROM tenant_summary) = (SELECT COUNT(*) FROM tenants);
-- the global table is whole on every shard
SELECT COUNT(*) = 3 FROM plans;
