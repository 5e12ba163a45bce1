#include "sweep/mpi_run.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "sweep/runner.hpp"
#if defined(FP4DRIFT_WITH_MPI)
#include <mpi.h>
#endif

namespace fp4d::sweep {

int launcher_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})  // OpenMPI's mpirun; MPICH's Hydra, Slurm's PMI-2
    if (const char* s = std::getenv(v); s && *s) return std::atoi(s);
  return std::getenv("PMIX_RANK") ? -1 : 0;  // a PMIx launcher (srun --mpi=pmix): MPI will say
}

#if !defined(FP4DRIFT_WITH_MPI)

bool mpi_available() { return false; }
int run_mpi(const Sweep&, const std::string&, int, const std::vector<std::string>&, const std::string&) {
  throw std::invalid_argument(
      "launched by mpirun, but this fp4drift was built without MPI (install libopenmpi-dev and rebuild): every rank "
      "would run the whole sweep");
}

#else

namespace {
constexpr int kTagMsg = 1;  // worker -> rank 0: "R" (a slot is free) or "D<index>\n<record>"
constexpr int kTagRun = 2;  // rank 0 -> worker: int run index, -1 = nothing left

std::string recv_string(int source, int tag, int* from) {
  MPI_Status st;
  MPI_Probe(source, tag, MPI_COMM_WORLD, &st);
  int n = 0;
  MPI_Get_count(&st, MPI_CHAR, &n);
  std::string s(static_cast<std::size_t>(n), '\0');
  MPI_Recv(s.data(), n, MPI_CHAR, st.MPI_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (from) *from = st.MPI_SOURCE;
  return s;
}
void send_string(const std::string& s) {
  MPI_Send(s.data(), static_cast<int>(s.size()), MPI_CHAR, 0, kTagMsg, MPI_COMM_WORLD);
}
void send_run(int to, int run) { MPI_Send(&run, 1, MPI_INT, to, kTagRun, MPI_COMM_WORLD); }
}  // namespace

bool mpi_available() { return true; }

int run_mpi(const Sweep& s, const std::string& outdir, int slots, const std::vector<std::string>& devices,
            const std::string& command_line) {
  MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) {
    const int rc = run_local(s, outdir, slots, devices, command_line);
    MPI_Finalize();
    return rc;
  }
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);

  // An error on any rank (a spawn, a log, the index, a record) must end the whole job: the
  // other ranks would otherwise wait for messages that never come.
  bool stopped = false;
  int rc = 0;
  try {
    ExecOptions o;
    o.outdir = outdir;
    o.backend = s.backend;
    o.slots = slots;
    o.local_rank = local_rank;
    o.rank = rank;
    o.omp_threads = default_omp_threads(slots * local_size);
    o.devices = devices;
    // Every rank of a node sees the same list (the same environment and /dev): the node's
    // first rank speaks for it.
    if (local_rank == 0) {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      warn_device_sharing(s.backend, devices, slots * local_size, std::string(" on node ") + host);
    }
    Executor ex(s, o);
    install_stop_handlers();

    if (rank == 0) {
      std::vector<int> todo;
      Coordinator co(s, outdir, IndexInfo{"running", "mpi", size, command_line});
      try {
        lock_outdir(outdir);
        todo = co.plan();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fp4drift: error: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      std::size_t next = 0;
      int remote_running = 0, retired = 0;
      const int remote_slots = (size - 1) * slots;
      for (;;) {
        if (g_sweep_stop.load() && !stopped) {
          stopped = true;
          ex.stop_all();
        }
        while (!stopped && next < todo.size() && ex.has_free_slot()) ex.launch(todo[next++]);
        bool idle = true;
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, kTagMsg, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        if (flag) {
          idle = false;
          int from = 0;
          const std::string m = recv_string(MPI_ANY_SOURCE, kTagMsg, &from);
          if (m == "R") {
            if (!stopped && next < todo.size()) {
              send_run(from, todo[next++]);
              ++remote_running;
            } else {
              send_run(from, -1);
              ++retired;
            }
          } else {  // "D<index>\n<record>"
            const std::size_t nl = m.find('\n');
            const int run = std::atoi(m.substr(1, nl - 1).c_str());
            --remote_running;
            co.finished(run, parse_record(m.substr(nl + 1), "the record of run " + s.runs.at(run).id + " from rank " +
                                                                 std::to_string(from)));
          }
        }
        for (const auto& [run, rec] : ex.poll()) {
          idle = false;
          co.finished(run, rec);
        }
        co.tick(ex.running() + remote_running);
        if (stopped && ex.running() == 0) break;  // remote ranks got the signal too (mpirun forwards it)
        if ((next == todo.size()) && ex.running() == 0 && remote_running == 0 && retired == remote_slots) break;
        if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      rc = co.finish(stopped);
    } else {
      for (int k = 0; k < slots; ++k) send_string("R");
      int retired = 0;
      for (;;) {
        if (g_sweep_stop.load() && !stopped) {
          stopped = true;
          ex.stop_all();
        }
        bool idle = true;
        int flag = 0;
        MPI_Iprobe(0, kTagRun, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        if (flag) {
          idle = false;
          int run = -1;
          MPI_Recv(&run, 1, MPI_INT, 0, kTagRun, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          if (run < 0 || stopped) ++retired;
          else ex.launch(run);
        }
        for (const auto& [run, rec] : ex.poll()) {
          idle = false;
          if (stopped) continue;  // rank 0 may be gone; the record is on disk for the next sweep
          std::string msg = "D";  // (built in steps: GCC 12 warns falsely on "D" + std::string)
          msg += std::to_string(run);
          msg += '\n';
          msg += record_text(rec);
          send_string(msg);
          send_string("R");
        }
        if (stopped && ex.running() == 0) break;
        if (retired == slots && ex.running() == 0) break;
        if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      rc = stopped ? 130 : 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4drift: error (rank %d): %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (stopped) {
    // An interrupted job: the other ranks may be gone already, so no collective call.
    std::fflush(stdout);
    std::_Exit(130);
  }
  // Every rank leaves with rank 0's status.
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}

#endif

}  // namespace fp4d::sweep
