#include "trace/run_rows.hpp"

#include <cmath>
#include <stdexcept>
#include <type_traits>

namespace fp4d {

RunRows::Id RunRows::doubles(h5::Group root, const std::string& path, h5::Dims row, Counts counts, bool create) {
  auto ds = create ? root.create_appendable<double>(path, std::move(row)) : root.open_appendable<double>(path);
  const std::string full = ds.path();
  entries_.push_back(Entry{std::move(ds), full, counts, {}, {}});
  return entries_.size() - 1;
}

RunRows::Id RunRows::ints(h5::Group root, const std::string& path, Counts counts, bool create) {
  auto ds = create ? root.create_appendable<std::int64_t>(path, {}) : root.open_appendable<std::int64_t>(path);
  const std::string full = ds.path();
  entries_.push_back(Entry{std::move(ds), full, counts, {}, {}});
  return entries_.size() - 1;
}

template <class F>
void RunRows::visit(Entry& e, F&& f) {
  std::visit(f, e.ds);
}

void RunRows::stage(Id id, const std::vector<double>& row) {
  auto& v = entries_.at(id).staged_d;
  v.insert(v.end(), row.begin(), row.end());
}
void RunRows::stage(Id id, const std::vector<std::int64_t>& row) {
  auto& v = entries_.at(id).staged_i;
  v.insert(v.end(), row.begin(), row.end());
}

void RunRows::stage_operands(const OperandIds& ids, const std::vector<OperandRecord>& operands) {
  std::vector<double> nmse, clipped, underflow, zero;
  for (const OperandRecord& o : operands) {
    nmse.push_back(o.nmse), clipped.push_back(o.clipped_fraction), underflow.push_back(o.underflow_fraction);
    zero.push_back(o.zero_scale_fraction);
  }
  stage(ids.nmse, nmse), stage(ids.clipped, clipped), stage(ids.underflow, underflow), stage(ids.zero_scales, zero);
}

void RunRows::commit(RowJournal& journal) {
  for (Entry& e : entries_)
    visit(e, [&](auto& ds) {
      using T = typename std::remove_reference_t<decltype(ds)>::value_type;
      std::vector<T>& v = [&]() -> std::vector<T>& {
        if constexpr (std::is_same_v<T, double>) return e.staged_d;
        else return e.staged_i;
      }();
      if (v.empty()) return;
      ds.append(v);
      journal.append(ds.path(), v);
      digests_.try_emplace(ds.path()).first->second.add(v);
      v.clear();
    });
}

std::map<std::string, std::uint64_t> RunRows::digests() const {
  std::map<std::string, std::uint64_t> out;
  for (const auto& [name, d] : digests_) out[name] = d.value();
  return out;
}

void RunRows::verify_and_truncate(const CheckpointMark& m) {
  const auto want_of = [&](const Entry& e) { return e.counts == Counts::Records ? m.records : m.compares; };
  try {
    for (Entry& e : entries_)
      visit(e, [&](auto& ds) {
        using T = typename std::remove_reference_t<decltype(ds)>::value_type;
        const std::uint64_t want = want_of(e);
        if (want == 0) return;
        const std::uint64_t have = ds.rows();
        if (have < want)
          throw ResumeRefused(ds.path() + " has " + std::to_string(have) + " rows, its checkpoint counts " + std::to_string(want));
        const auto it = m.digests.find(ds.path());
        if (it == m.digests.end()) throw ResumeRefused("the checkpoint has no digest of " + ds.path());
        std::vector<T> rows = ds.template read<T>();
        rows.resize(want * ds.row_elements());
        Fnv1a64 d;
        d.add(rows);
        if (d.value() != it->second) throw ResumeRefused("the rows of " + ds.path() + " are not those its checkpoint recorded");
      });
  } catch (const ResumeRefused&) {
    throw;
  } catch (const std::exception& e) {  // a chunk that fails its Fletcher32 checksum or to inflate
    throw ResumeRefused("the trace cannot be read back (" + std::string(e.what()) + ")");
  }
  for (const auto& [name, d] : m.digests) digests_.emplace(name, Fnv1a64(d));
  for (Entry& e : entries_) visit(e, [&](auto& ds) { ds.truncate(want_of(e)); });
}

void RunRows::replay(const RowJournal& journal, std::uint64_t length) {
  std::map<std::string, Entry*> by_path;
  for (Entry& e : entries_) visit(e, [&](auto& ds) { by_path[ds.path()] = &e; });
  journal.replay(length, [&](const std::string& name, const std::vector<double>* d, const std::vector<std::int64_t>* i) {
    const auto it = by_path.find(name);
    if (it == by_path.end()) throw ResumeRefused("its journal names a dataset the trace does not have: " + name);
    visit(*it->second, [&](auto& ds) {
      using T = typename std::remove_reference_t<decltype(ds)>::value_type;
      if constexpr (std::is_same_v<T, double>) {
        if (!d) throw ResumeRefused("its journal holds integers for " + ds.path());
        ds.append(*d);
      } else {
        if (!i) throw ResumeRefused("its journal holds floats for " + ds.path());
        ds.append(*i);
      }
    });
  });
}

const h5::Appendable<double>& RunRows::doubles_at(Id id) const { return std::get<h5::Appendable<double>>(entries_.at(id).ds); }
const h5::Appendable<std::int64_t>& RunRows::ints_at(Id id) const {
  return std::get<h5::Appendable<std::int64_t>>(entries_.at(id).ds);
}

void RunRows::close() {
  for (Entry& e : entries_) visit(e, [](auto& ds) { ds = std::remove_reference_t<decltype(ds)>(); });
}

void RunRows::reopen(h5::Group root) {
  for (Entry& e : entries_)
    visit(e, [&](auto& ds) {
      using T = typename std::remove_reference_t<decltype(ds)>::value_type;
      ds = root.open_appendable<T>(e.path);
    });
}

void SwmrPhase::start(h5::File& file) {
  if (active_ || !file.swmr_format()) return;
  file.start_swmr_write();
  active_ = true;
}

void SwmrPhase::set_attrs(h5::File& file, std::function<void(h5::Group)> write) {
  if (active_) deferred_.push_back(std::move(write));
  else write(file.root());
}

void SwmrPhase::end(h5::File& file, RunRows& rows) {
  if (!active_) return;
  const std::string path = file.path();
  active_ = false;
  rows.close();
  file.close();
  file = h5::File::open_rw(path, h5::StaleWriter::Refuse, h5::FileLock::Skip);  // readers may hold it
  rows.reopen(file.root());
  std::vector<std::function<void(h5::Group)>> todo;
  todo.swap(deferred_);
  for (const auto& write : todo) write(file.root());
}

double growth_exponent(const std::vector<std::int64_t>& steps, const std::vector<double>& err) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (!(err[i] > 0) || steps[i] <= 0) continue;
    const double x = std::log(static_cast<double>(steps[i])), y = std::log(err[i]);
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double den = n * sxx - sx * sx;
  return n >= 2 && den > 0 ? (n * sxy - sx * sy) / den : std::nan("");
}

}  // namespace fp4d
