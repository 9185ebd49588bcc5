-- The highest id issued and deleted again (gh-ost's autoinc-copy-deletes),
-- recorded so checks.sql can hold the owner's counter above it.
INSERT INTO tickets (emp_no, note) VALUES (@k, 'workload');
INSERT INTO tickets_issued (emp_no, max_id) VALUES (@k, LAST_INSERT_ID()) ON DUPLICATE KEY UPDATE max_id = GREATEST(max_id, VALUES(max_id));
DELETE FROM tickets WHERE id = LAST_INSERT_ID();
INSERT INTO emp_flags (emp_no, flag, n) VALUES (@k, 'beta', 1) ON DUPLICATE KEY UPDATE n = n + 1;
DELETE FROM emp_flags WHERE emp_no = @k AND flag = 'it''s';
UPDATE emp_tiers SET since = since + INTERVAL 1 DAY WHERE emp_no = @k;
INSERT INTO emp_events (at, tag, emp_no, v) VALUES (NOW(6), UNHEX(CONCAT(LPAD(HEX(@k), 8, '0'), 'FF00')), @k, 1) ON DUPLICATE KEY UPDATE v = v + 1;
UPDATE emp_events SET v = v + 1 WHERE emp_no = @k;
-- A key change (red and blue swap), a delete and re-insert, an update by key.
UPDATE emp_badges SET badge = IF(badge = 'red', 'blue', 'red') WHERE emp_no = @k AND badge IN ('red', 'blue');
DELETE FROM emp_badges WHERE emp_no = @k AND badge = 'gold';
INSERT INTO emp_badges (emp_no, badge, points, note) VALUES (@k, 'gold', 1, 'workload');
UPDATE emp_badges SET points = points + 1 WHERE emp_no = @k AND badge IN ('red', 'blue');
