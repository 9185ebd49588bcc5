-- every payment's rental belongs to the same employee (no child left on another shard than its parent)
SELECT COUNT(*) = 0 FROM payments p JOIN rentals r ON r.rental_id = p.rental_id WHERE p.emp_no <> r.emp_no;
-- the triggers kept each rental's total exactly once (a trigger that fired on a copied row counts twice)
SELECT COUNT(*) = 0 FROM rentals r WHERE r.paid_total <> (SELECT COALESCE(SUM(p.amount), 0) FROM payments p WHERE p.rental_id = r.rental_id);
-- the deleted rental's payment kept its row, with the reference set to NULL (the cascade was repeated by the apply)
SELECT COUNT(*) = 0 FROM payments p LEFT JOIN rentals r ON r.rental_id = p.rental_id WHERE p.rental_id IS NOT NULL AND r.rental_id IS NULL;
SELECT balance(emp_no) >= 0 FROM employees ORDER BY emp_no LIMIT 1;
