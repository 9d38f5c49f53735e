// Placeholder: the real-PostgreSQL fixture.
