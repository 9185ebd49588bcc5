-- Sakila's shape (customer, rental, payment sharded on the customer): a
-- sharded child references a sharded parent by the parent's own id, without
-- the shard key (payments.rental_id -> rentals.rental_id), as most
-- applications do. Ids are unique across shards (emp_no * 1000 + n), as an
-- application's are; every payment's rental belongs to the same employee, so
-- a split never separates them, and shardctl must see that on the rows.
-- Also: a sharded -> global key, ON DELETE SET NULL / ON UPDATE CASCADE,
-- AFTER INSERT/UPDATE triggers that keep a running total in the parent (they
-- must not fire on shardctl's own writes), a view, a function, a procedure.

CREATE TABLE items (
  item_id INT NOT NULL PRIMARY KEY,
  title VARCHAR(40) NOT NULL
) ENGINE=InnoDB;
INSERT INTO items VALUES (1, 'ACADEMY DINOSAUR'), (2, 'ACE GOLDFINGER'), (3, 'ADAPTATION HOLES');

CREATE TABLE rentals (
  rental_id INT NOT NULL PRIMARY KEY,
  emp_no INT NOT NULL,
  item_id INT NOT NULL,
  rented DATETIME NOT NULL,
  paid_total DECIMAL(10,2) NOT NULL DEFAULT 0,
  KEY emp (emp_no),
  KEY item (item_id),
  CONSTRAINT fk_rental_item FOREIGN KEY (item_id) REFERENCES items (item_id)
) ENGINE=InnoDB;

CREATE TABLE payments (
  payment_id INT NOT NULL PRIMARY KEY,
  emp_no INT NOT NULL,
  rental_id INT NULL,
  amount DECIMAL(5,2) NOT NULL,
  paid DATETIME NOT NULL,
  KEY emp (emp_no),
  KEY rental (rental_id),
  CONSTRAINT fk_payment_rental FOREIGN KEY (rental_id) REFERENCES rentals (rental_id) ON DELETE SET NULL ON UPDATE CASCADE
) ENGINE=InnoDB;

INSERT INTO rentals (rental_id, emp_no, item_id, rented) SELECT emp_no * 1000 + 1, emp_no, 1 + emp_no % 3, '2005-05-24 22:53:30' FROM employees;
INSERT INTO rentals (rental_id, emp_no, item_id, rented) SELECT emp_no * 1000 + 2, emp_no, 1 + (emp_no + 1) % 3, '2005-05-25 11:30:37' FROM employees;

-- Seeded before the triggers exist (a trigger cannot update the table its statement reads).
INSERT INTO payments (payment_id, emp_no, rental_id, amount, paid) SELECT rental_id, emp_no, rental_id, 2.99, rented FROM rentals;
UPDATE rentals SET paid_total = 2.99;

DELIMITER ;;
CREATE TRIGGER payments_ai AFTER INSERT ON payments FOR EACH ROW
  UPDATE rentals SET paid_total = paid_total + NEW.amount WHERE rental_id = NEW.rental_id;;
CREATE TRIGGER payments_au AFTER UPDATE ON payments FOR EACH ROW
  UPDATE rentals SET paid_total = paid_total + NEW.amount - OLD.amount WHERE rental_id = NEW.rental_id AND NEW.rental_id = OLD.rental_id;;
CREATE FUNCTION balance(k INT) RETURNS DECIMAL(12,2) READS SQL DATA
  RETURN (SELECT COALESCE(SUM(amount), 0) FROM {{schema}}.payments WHERE emp_no = k);;
CREATE PROCEDURE rent_and_pay(k INT, item INT, amt DECIMAL(5,2))
BEGIN
  DECLARE r INT;
  SELECT COALESCE(MAX(rental_id), k * 1000) + 1 INTO r FROM rentals WHERE emp_no = k;
  INSERT INTO rentals (rental_id, emp_no, item_id, rented) VALUES (r, k, item, NOW());
  INSERT INTO payments (payment_id, emp_no, rental_id, amount, paid)
  SELECT COALESCE(MAX(payment_id), k * 1000) + 1, k, r, amt, NOW() FROM payments WHERE emp_no = k;
END;;
DELIMITER ;


CREATE VIEW customer_balance AS
  SELECT r.emp_no, COUNT(DISTINCT r.rental_id) AS rentals, COALESCE(SUM(p.amount), 0) AS paid
  FROM rentals r LEFT JOIN payments p ON p.rental_id = r.rental_id
  GROUP BY r.emp_no;
