// Named axes and units of trace datasets, as netCDF-4 writes them: a dimension is a 1-D
// dataset made an HDF5 dimension scale (its coordinate variable, named after the dimension),
// attached to the axes it indexes; a `units` attribute states what a value is measured in
// (UDUNITS spelling: "1" for a dimensionless number). h5py shows them as ds.dims[i].label and
// ds.dims[i][0]; xarray.open_dataset(path, group=..., engine="h5netcdf") labels the axes with
// them. The layouts are in docs/trace-format.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/h5.hpp"

namespace fp4d::dims {

// Makes the existing 1-D dataset `ds` the coordinate of the dimension named after it (the rows
// of a run: step, compare_step; the points of a sum: n), with a long_name.
void coordinate(h5::Dataset ds, const std::string& long_name);

// Writes g/name = 0, 1, ..., n-1 (int64) and makes it the coordinate of dimension `name`: the
// axis of layers, parameters, operand slots or runs, whose meaning long_name states.
h5::Dataset index(h5::Group g, const std::string& name, std::uint64_t n, const std::string& long_name);

// Attaches one dimension per axis of ds, in order, and sets its units ("" sets none: a count
// or an index has no unit).
void name_axes(h5::Dataset ds, const std::vector<h5::Dataset>& axes, const std::string& units);

}  // namespace fp4d::dims
