"""Numbers about explanation maps: `faithfulness` (deletion, insertion and perturbation
curves), `agreement` (between two maps), `localisation` (against a box), and `text`
(attention matrices of a token sequence)."""
