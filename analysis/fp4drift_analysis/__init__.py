"""fp4drift_analysis: read fp4drift HDF5 traces and turn them into plots, fits and verdicts."""

from .stats import BiasTest, GrowthFit, fit_growth, sr_bias_test, t_quantile
from .traces import SchemaError, load, load_gemm, load_quantize, load_run, register_loader
from .sweep import Sweep, load_sweep  # registers the sweep index with load()

__all__ = ["BiasTest", "GrowthFit", "SchemaError", "fit_growth", "load", "load_gemm", "load_quantize", "load_run",
           "load_sweep", "register_loader", "sr_bias_test", "Sweep", "t_quantile"]
