"""Calibration: parse measured inputs and fit the model's few physical parameters."""
