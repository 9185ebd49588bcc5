-- Foreign keys (RESTRICT, CASCADE, SET NULL, a self-reference, sharded -> global),
-- BEFORE and AFTER triggers (one sets columns, two write other tables),
-- views (one naming its schema), a function, a procedure and an event.

CREATE TABLE regions (
  code CHAR(2) NOT NULL PRIMARY KEY,
  name VARCHAR(40) NOT NULL
) ENGINE=InnoDB;

CREATE TABLE customers (
  emp_no INT NOT NULL,
  id INT NOT NULL,
  parent_id INT NULL,
  region CHAR(2) NULL,
  name VARCHAR(60) NOT NULL,
  created DATETIME NULL,
  PRIMARY KEY (emp_no, id),
  KEY parent (emp_no, parent_id),
  KEY region (region),
  CONSTRAINT fk_customer_parent FOREIGN KEY (emp_no, parent_id) REFERENCES customers (emp_no, id) ON DELETE CASCADE,
  CONSTRAINT fk_customer_region FOREIGN KEY (region) REFERENCES regions (code) ON DELETE SET NULL
) ENGINE=InnoDB;

CREATE TABLE orders (
  emp_no INT NOT NULL,
  id INT NOT NULL,
  customer_id INT NOT NULL,
  note VARCHAR(100) NOT NULL,
  amount DECIMAL(10,2) NOT NULL DEFAULT 0,
  PRIMARY KEY (emp_no, id),
  KEY customer (emp_no, customer_id),
  CONSTRAINT fk_order_customer FOREIGN KEY (emp_no, customer_id) REFERENCES customers (emp_no, id)
) ENGINE=InnoDB;

CREATE TABLE order_audit (
  emp_no INT NOT NULL,
  audit_no INT NOT NULL,
  order_id INT NOT NULL,
  PRIMARY KEY (emp_no, audit_no),
  KEY order_ref (emp_no, order_id),
  CONSTRAINT fk_audit_order FOREIGN KEY (emp_no, order_id) REFERENCES orders (emp_no, id) ON DELETE CASCADE
) ENGINE=InnoDB;

-- Global (no emp_no column): what cleanup deletes from sharded tables
-- cannot hide a row logged here.
CREATE TABLE deleted_orders (
  emp INT NOT NULL,
  order_id INT NOT NULL,
  note VARCHAR(100) NOT NULL,
  PRIMARY KEY (emp, order_id)
) ENGINE=InnoDB;

DELIMITER ;;
CREATE TRIGGER customers_bi BEFORE INSERT ON customers FOR EACH ROW
BEGIN
  SET NEW.name = CONCAT('t:', NEW.name);
  IF NEW.created IS NULL THEN SET NEW.created = NOW(); END IF;
END;;
CREATE TRIGGER customers_bi2 BEFORE INSERT ON customers FOR EACH ROW FOLLOWS customers_bi
  SET NEW.region = COALESCE(NEW.region, 'EU');;
CREATE TRIGGER orders_ai AFTER INSERT ON orders FOR EACH ROW
  INSERT INTO order_audit (emp_no, audit_no, order_id)
  SELECT NEW.emp_no, COALESCE(MAX(audit_no), 0) + 1, NEW.id FROM order_audit WHERE emp_no = NEW.emp_no;;
CREATE TRIGGER orders_ad AFTER DELETE ON orders FOR EACH ROW
  REPLACE INTO deleted_orders (emp, order_id, note) VALUES (OLD.emp_no, OLD.id, OLD.note);;
CREATE FUNCTION order_total(k INT) RETURNS DECIMAL(12,2) READS SQL DATA
  RETURN (SELECT COALESCE(SUM(amount), 0) FROM {{schema}}.orders WHERE emp_no = k);;
CREATE PROCEDURE add_order(k INT, amt DECIMAL(10,2))
BEGIN
  INSERT INTO orders (emp_no, id, customer_id, note, amount)
  SELECT k, COALESCE(MAX(id), 0) + 1, (SELECT MIN(id) FROM customers WHERE emp_no = k), 'proc', amt FROM orders WHERE emp_no = k;
END;;
CREATE EVENT purge_audit ON SCHEDULE EVERY 1 DAY STARTS '2035-01-01 00:00:00' ON COMPLETION PRESERVE ENABLE
  DO DELETE FROM order_audit WHERE audit_no < 0;;
DELIMITER ;

CREATE VIEW customer_orders AS
  SELECT c.emp_no, c.id, c.name, COUNT(o.id) AS orders, COALESCE(SUM(o.amount), 0) AS total
  FROM customers c LEFT JOIN orders o ON o.emp_no = c.emp_no AND o.customer_id = c.id
  GROUP BY c.emp_no, c.id, c.name;
CREATE VIEW big_customers AS
  SELECT emp_no, id, total FROM {{schema}}.customer_orders WHERE total > 100;

INSERT INTO regions VALUES ('EU', 'Europe'), ('NA', 'North America'), ('AS', 'Asia');
INSERT INTO customers (emp_no, id, parent_id, region, name, created)
  SELECT emp_no, 1, NULL, ELT(1 + emp_no % 3, 'EU', 'NA', 'AS'), first_name, '2020-01-01 00:00:00' FROM employees;
INSERT INTO customers (emp_no, id, parent_id, region, name, created)
  SELECT emp_no, 2, 1, NULL, last_name, '2020-01-01 00:00:00' FROM employees WHERE emp_no % 2 = 0;
INSERT INTO orders (emp_no, id, customer_id, note, amount)
  SELECT emp_no, 1, 1, 'seed', emp_no % 200 FROM employees;
INSERT INTO orders (emp_no, id, customer_id, note, amount)
  SELECT emp_no, 2, 2, 'seed2', 5 FROM employees WHERE emp_no % 2 = 0;
