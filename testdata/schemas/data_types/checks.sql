-- Each statement returns one row; its first column must be 1 on every shard.
SELECT COUNT(*) = 0 FROM profiles WHERE label <> CONCAT(kind, '-', emp_no) OR score <> emp_no % 97;
SELECT COUNT(*) = 0 FROM profiles WHERE ST_X(place) <> emp_no % 90 OR JSON_EXTRACT(doc, '$.k') <> emp_no;
SELECT COUNT(*) = 4 FROM currencies;
