"""What crosses a process boundary and every layer may import: the token rule so far
(docs/design.md, "Layers"). Imports nothing else of burstguard."""
