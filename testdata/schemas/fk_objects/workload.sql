INSERT INTO customers (emp_no, id, parent_id, region, name) SELECT @k, COALESCE(MAX(id), 0) + 1, 1, NULL, 'w' FROM customers WHERE emp_no = @k;
INSERT INTO orders (emp_no, id, customer_id, note, amount) SELECT @k, COALESCE(MAX(id), 0) + 1, 1, 'w', 3 FROM orders WHERE emp_no = @k;
CALL add_order(@k, 7);
DELETE FROM orders WHERE emp_no = @k AND customer_id = 2;
DELETE FROM customers WHERE emp_no = @k AND id = 2;
