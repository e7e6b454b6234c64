"""A sibling of model.py, imported relatively and as a top-level module."""


def double(value):
    return value * 2
