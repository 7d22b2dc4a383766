"""worker.yaml: the schema (`schema`), its sections (`sections`), the commented template."""
