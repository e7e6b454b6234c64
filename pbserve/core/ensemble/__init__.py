"""Ensembles: Triton's `platform: "ensemble"`, a data flow of steps over other models
(validation.py checks one against its composing models, steps.py is its graph,
scheduler.py runs a request through it, model.py is what the manager serves)."""
