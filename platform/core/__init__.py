"""Ground floor: settings, the pool, migrations, the wake layer, ids, logs."""
