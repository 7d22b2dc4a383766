"""The node: its use cases (`service`), its composition (`compose`), its start-up (`bootstrap`)."""
