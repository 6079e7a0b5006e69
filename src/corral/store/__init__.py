"""Every SQL statement: the schema, its migrations, the reads, and the one write path (changes.ChangeSet)."""
