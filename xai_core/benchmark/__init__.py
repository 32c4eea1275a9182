"""`python -m xai_core benchmark`: methods x images x metrics -> a tidy table and a ranked
summary, resumable, on one machine or as Ray tasks. No streamlit here.

`plan` (settings, images, boxes), `scoring` (one image x model x method), `run` (journal,
local and Ray backends, tables), `summary` (bootstrap intervals, ranks, the random floor).
The sub-command is `xai_core/cli/benchmark.py`.
"""
