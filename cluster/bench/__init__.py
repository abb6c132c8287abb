"""`raypex bench`'s measurements: in-process stages, Ray stages, the learner matrix and the report
table with its ratios and bars."""
