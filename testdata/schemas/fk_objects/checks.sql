-- Each statement returns one row; its first column must be 1 on every shard.
-- Every customer went through the BEFORE INSERT triggers exactly once.
SELECT COUNT(*) = 0 FROM customers WHERE name NOT LIKE 't:%' OR name LIKE 't:t:%' OR created IS NULL OR region IS NULL;
-- The AFTER INSERT trigger wrote one audit row per order, never two.
SELECT (SELECT COUNT(*) FROM order_audit) = (SELECT COUNT(*) FROM orders);
-- The function and the views work.
SELECT order_total(-1) = 0;
SELECT COUNT(*) = (SELECT COUNT(*) FROM customers) FROM customer_orders;
SELECT COUNT(*) >= 0 FROM big_customers;
-- Only the application deleted orders (those of customer 2): cleanup, prune
-- and abort deletes never fired the AFTER DELETE trigger.
SELECT COUNT(*) = 0 FROM deleted_orders WHERE note = 'seed';
