"""What crosses a process boundary, which every layer may import: the token rule
(`tokens`) and the one spelling of a backend URL (`urls`) so far (docs/design.md,
"Layers"). Imports nothing of burstguard but `errors`."""
