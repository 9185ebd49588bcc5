-- Key shapes and counters (from gh-ost's localtests: autoinc-copy-deletes,
-- enum-pk, swap-uk-uk): an AUTO_INCREMENT table whose highest ids are
-- issued and deleted, ENUM primary keys (after an INT, and leading), a
-- composite key with DATETIME(6) and VARBINARY parts, and a table whose only
-- keys are UNIQUE over NOT NULL columns.

-- Ids are the employees' numbers at first; each shard's counter then starts
-- far above its own keys, and a lower shard's above a higher one's, so
-- shards never issue the same id and a merge of a shard into its lower
-- neighbour (the corpus merges shard 2 into shard 1) copies only ids below
-- the target's counter: a merge target whose counter lies below the merged
-- shard's ids is refused, since the copy would drag it among them.
CREATE TABLE tickets (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  emp_no INT NOT NULL,
  note VARCHAR(30) NOT NULL,
  KEY emp_no (emp_no)
) ENGINE=InnoDB;
INSERT INTO tickets (id, emp_no, note) SELECT emp_no, emp_no, 'seed' FROM employees;
SET @raise = CONCAT('ALTER TABLE tickets AUTO_INCREMENT = ', 1000000000000000 - (SELECT MIN(emp_no) FROM employees) * 1000);
PREPARE raise FROM @raise;
EXECUTE raise;
DEALLOCATE PREPARE raise;

-- The highest id each employee's workload was issued (its ticket deleted
-- again): the owner's counter must stay above it after every operation.
CREATE TABLE tickets_issued (
  emp_no INT NOT NULL PRIMARY KEY,
  max_id BIGINT NOT NULL
) ENGINE=InnoDB;

CREATE TABLE emp_flags (
  emp_no INT NOT NULL,
  flag ENUM('zeta', 'beta', 'it''s', 'back\\slash', 'alpha') NOT NULL,
  n INT NOT NULL,
  PRIMARY KEY (emp_no, flag)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO emp_flags SELECT emp_no, ELT(1 + emp_no % 5, 'zeta', 'beta', 'it''s', 'back\\slash', 'alpha'), 0 FROM employees;
INSERT INTO emp_flags SELECT emp_no, 'alpha', 0 FROM employees WHERE emp_no % 5 <> 4;

-- A leading ENUM: rows sort by the member's index, not its name.
CREATE TABLE emp_tiers (
  tier ENUM('gold', 'silver', 'bronze') NOT NULL,
  emp_no INT NOT NULL,
  since DATE NOT NULL,
  PRIMARY KEY (tier, emp_no)
) ENGINE=InnoDB;
INSERT INTO emp_tiers SELECT ELT(1 + emp_no % 3, 'gold', 'silver', 'bronze'), emp_no, hire_date FROM employees;

-- DATETIME(6) and VARBINARY key parts, with no shard column in the key;
-- binary tags hold 0x00 and 0xFF bytes, times differ in microseconds.
CREATE TABLE emp_events (
  at DATETIME(6) NOT NULL,
  tag VARBINARY(16) NOT NULL,
  emp_no INT NOT NULL,
  v INT NOT NULL,
  PRIMARY KEY (at, tag),
  KEY emp_no (emp_no)
) ENGINE=InnoDB;
INSERT INTO emp_events SELECT '2020-01-01 00:00:00' + INTERVAL emp_no MICROSECOND, UNHEX(CONCAT('00', LPAD(HEX(emp_no), 8, '0'), 'FF')), emp_no, 0 FROM employees;
INSERT INTO emp_events SELECT '2020-01-01 00:00:00' + INTERVAL emp_no MICROSECOND, UNHEX(LPAD(HEX(emp_no), 8, '0')), emp_no, 0 FROM employees;

-- No primary key: its rows are identified by emp_badge (an INT first
-- column beats by_badge's string); the workload changes key values.
CREATE TABLE emp_badges (
  emp_no INT NOT NULL,
  badge VARCHAR(10) NOT NULL,
  points INT NOT NULL,
  note VARCHAR(40) NULL,
  UNIQUE KEY by_badge (badge, emp_no),
  UNIQUE KEY emp_badge (emp_no, badge)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO emp_badges SELECT emp_no, 'red', 0, NULL FROM employees;
INSERT INTO emp_badges SELECT emp_no, 'gold', 0, 'seed' FROM employees;
