-- Column types and table kinds: generated columns (virtual and stored),
-- GEOMETRY with a SPATIAL index, JSON, ENUM/SET/YEAR, BLOB/TEXT, zero dates
-- under a permissive sql_mode, utf8mb4 with a non-default collation, a
-- MyISAM table, a partitioned table, composite and string primary keys.
SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION';

CREATE TABLE profiles (
  emp_no INT NOT NULL PRIMARY KEY,
  kind ENUM('a', 'b', 'c') NOT NULL DEFAULT 'a',
  flags SET('x', 'y', 'z') NOT NULL DEFAULT '',
  born YEAR NULL,
  doc JSON NULL,
  photo BLOB NULL,
  bio TEXT NULL,
  seen DATETIME NOT NULL DEFAULT '0000-00-00 00:00:00',
  label VARCHAR(40) GENERATED ALWAYS AS (CONCAT(kind, '-', emp_no)) VIRTUAL,
  score INT GENERATED ALWAYS AS (emp_no % 97) STORED,
  place POINT NOT NULL,
  SPATIAL INDEX place (place)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE events_log (
  emp_no INT NOT NULL,
  seq INT NOT NULL,
  msg VARCHAR(50) NOT NULL,
  PRIMARY KEY (emp_no, seq)
) ENGINE=MyISAM;

CREATE TABLE visits (
  emp_no INT NOT NULL,
  day DATE NOT NULL,
  n INT NOT NULL,
  PRIMARY KEY (emp_no, day)
) ENGINE=InnoDB PARTITION BY HASH (emp_no) PARTITIONS 3;

CREATE TABLE currencies (
  code VARCHAR(3) NOT NULL,
  name VARCHAR(30) NOT NULL,
  PRIMARY KEY (code)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

INSERT INTO currencies VALUES ('EUR', 'Euro'), ('eur', 'lower-case euro'), ('USD', 'Dollar'), ('JPY', 'Yen ¥');
INSERT INTO profiles (emp_no, kind, flags, born, doc, photo, bio, seen, place)
  SELECT emp_no, ELT(1 + emp_no % 3, 'a', 'b', 'c'), IF(emp_no % 2 = 0, 'x,y', ''), 1950 + emp_no % 50,
         JSON_OBJECT('k', emp_no, 'tags', JSON_ARRAY('a', 'ü')), UNHEX(SUBSTRING(SHA2(CONCAT(emp_no), 256), 1, 32)), CONCAT('Grüße ', first_name),
         IF(emp_no % 5 = 0, '0000-00-00 00:00:00', '2021-03-04 05:06:07'),
         ST_GeomFromText(CONCAT('POINT(', emp_no % 90, ' ', emp_no % 45, ')'))
  FROM employees;
INSERT INTO events_log (emp_no, seq, msg) SELECT emp_no, 1, 'seed' FROM employees;
INSERT INTO visits (emp_no, day, n) SELECT emp_no, '2023-12-31', 1 FROM employees;
