"""Persistence: engine, models, migrations, repositories and the unit of work."""
