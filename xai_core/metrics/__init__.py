"""Numbers about explanation maps: `faithfulness` (deletion, insertion and perturbation
curves), `agreement` (between two maps), `localisation` (against a box), `stability`, and
`text_heads` (what the attention heads of a text encoder do over a token sequence)."""
