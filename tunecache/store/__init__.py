"""Storage: SQLAlchemy models, the engine factory and schema migrations of a cache database."""
