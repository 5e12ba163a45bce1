// MPI mode of a sweep (OpenMPI's mpirun, or any MPI-3 launcher): rank 0 owns the sweep
// (Coordinator) and hands runs out one at a time to whichever rank has a free slot - runs
// differ in length by orders of magnitude (steps, widths), so a static split by index would
// leave ranks idle behind one long run. Every rank (rank 0 included) runs its runs as
// children, `workers` at a time, with CUDA_VISIBLE_DEVICES set to one GPU per child (node-local
// slot local_rank x workers + k mod the GPU count, sweep/device_assignment.hpp) for --backend
// cuda. OUTDIR must be on a filesystem every rank sees.
#pragma once

#include <string>

#include "sweep/expand.hpp"

namespace fp4d::sweep {

// World size announced by an MPI launcher's environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE); -1
// when a PMIx launcher started the process without saying (ask MPI); 0 when no launcher did.
int launcher_world_size();
bool mpi_available();  // this build has MPI
// Initialises MPI, runs the sweep over the ranks, finalises; the exit status (every rank).
// devices: as run_local's, per node (each rank's children take the next ones).
int run_mpi(const Sweep& s, const std::string& outdir, int slots, const std::vector<std::string>& devices,
            const std::string& command_line);

}  // namespace fp4d::sweep
