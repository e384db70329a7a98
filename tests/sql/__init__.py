"""The SQL home (inventory/sql/): schema and migrations, the one owner of statuses, the user-SQL guard."""
