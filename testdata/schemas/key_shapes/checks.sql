-- Each statement returns one row; its first column must be 1 on every shard.
-- The counter carried: every id the shard's tickets were issued lies below it.
SELECT COALESCE((SELECT MAX(max_id) FROM tickets_issued), 0) <
  (SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tickets');
SELECT COUNT(*) = 0 FROM tickets WHERE note <> 'seed';
SELECT COUNT(*) = 0 FROM emp_flags WHERE flag = '' OR n < 0;
SELECT COUNT(*) = 0 FROM emp_events WHERE v < 0 OR tag = '';
-- The key changes applied exactly: one of red and blue, and one gold, per employee.
SELECT COUNT(*) = 0 FROM (SELECT emp_no FROM emp_badges WHERE badge IN ('red', 'blue') GROUP BY emp_no HAVING COUNT(*) <> 1) x;
SELECT (SELECT COUNT(*) FROM emp_badges WHERE badge = 'gold') = (SELECT COUNT(*) FROM emp_badges WHERE badge IN ('red', 'blue'));
