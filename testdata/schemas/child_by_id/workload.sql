CALL rent_and_pay(@k, 2, 4.99);
UPDATE payments SET amount = amount + 1 WHERE emp_no = @k AND payment_id = @k * 1000 + 1;
DELETE FROM rentals WHERE emp_no = @k AND rental_id = @k * 1000 + 2;
