-- autocommit: events_log is MyISAM, which MySQL with GTIDs refuses inside a
-- multi-statement transaction (error 1785); the application writes zero
-- dates under the permissive sql_mode the schema was made with.
SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION';
UPDATE profiles SET bio = CONCAT(COALESCE(bio, ''), 'x'), flags = 'x,z', kind = 'c', seen = '0000-00-00 00:00:00' WHERE emp_no = @k;
INSERT INTO events_log (emp_no, seq, msg) SELECT @k, COALESCE(MAX(seq), 0) + 1, 'w' FROM events_log WHERE emp_no = @k;
INSERT INTO visits (emp_no, day, n) VALUES (@k, '2024-01-01', 1) ON DUPLICATE KEY UPDATE n = n + 1;
