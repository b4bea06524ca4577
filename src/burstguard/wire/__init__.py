"""What crosses a process boundary, which every layer may import: the token rule
(`tokens`), the one spelling of a backend URL (`urls`), prefix block hashes (`prefix`)
and request outcomes and shed reasons (`outcomes`) so far (docs/design.md,
"Layers"). Imports nothing of burstguard but `errors`."""
