"""fp4drift_analysis: read fp4drift HDF5 traces and turn them into plots and verdicts."""

from .traces import SchemaError, load_quantize, load_run

__all__ = ["SchemaError", "load_quantize", "load_run"]
