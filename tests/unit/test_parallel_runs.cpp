// ParallelRuns: every task of a round runs exactly once, on distinct threads, rounds do not
// overlap, and a task's exception reaches the caller after the round (lowest index first)
// without breaking later rounds.
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "sim/parallel_runs.hpp"
#include "support/catch.hpp"

using namespace fp4d;

TEST_CASE("parallel runs: each task once per round, on its own thread, rounds in order", "[parallel_runs]") {
  for (const std::size_t n : {1u, 2u, 5u}) {
    ParallelRuns team(n);
    CHECK(team.size() == n);
    std::vector<int> count(n, 0);
    std::vector<std::size_t> last_round(n, 0);
    std::atomic<int> in_round{0};
    std::atomic<bool> overlap{false};
    for (std::size_t round = 1; round <= 200; ++round) {
      std::mutex mu;
      std::set<std::thread::id> ids;
      team.run([&](std::size_t i) {
        if (in_round.fetch_add(1) >= static_cast<int>(n)) overlap = true;
        ++count[i];
        last_round[i] = round;
        {
          std::lock_guard<std::mutex> lk(mu);
          ids.insert(std::this_thread::get_id());
        }
        in_round.fetch_sub(1);
      });
      INFO("n " << n << " round " << round);
      REQUIRE(ids.size() == n);  // n distinct threads, the caller's among them
      REQUIRE(ids.count(std::this_thread::get_id()) == 1);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(last_round[i] == round);  // done when run returns
    }
    CHECK_FALSE(overlap.load());
    CHECK(count == std::vector<int>(n, 200));
  }
  CHECK_THROWS_AS(ParallelRuns(0), std::invalid_argument);
}

TEST_CASE("parallel runs: exceptions come back after the round, lowest task first", "[parallel_runs]") {
  ParallelRuns team(3);
  std::atomic<int> ran{0};
  try {
    team.run([&](std::size_t i) {
      ++ran;
      if (i == 2) throw std::runtime_error("task 2");
      if (i == 1) throw std::logic_error("task 1");
    });
    FAIL("no exception");
  } catch (const std::logic_error& e) {
    CHECK(std::string(e.what()) == "task 1");
  }
  CHECK(ran == 3);  // every task ran to its end
  // The caller's own task throwing, and the team still works afterwards.
  CHECK_THROWS_WITH(team.run([](std::size_t i) {
    if (i == 0) throw std::runtime_error("task 0");
  }), "task 0");
  ran = 0;
  team.run([&](std::size_t) { ++ran; });
  CHECK(ran == 3);
}
