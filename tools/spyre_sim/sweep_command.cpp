// spyre-sim sweep / sweep-merge: every point of a grid of config values, each in its
// own `spyre-sim run` process (N at a time, with progress, an ETA and a per-point
// timeout), one JSON per point in --out, a merged CSV; resumable (points already in
// --out are skipped) and shardable (--shard i/n) so a job array can split a sweep over
// machines and sweep-merge joins the shards.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "spyre_sim/commands.h"

namespace spyre::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Axis {
  std::string key;  // "config" selects the --config file; anything else is a --set key
  std::vector<std::string> values;
};

Axis parse_axis(const std::string& g) {
  const auto eq = g.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == g.size()) {
    throw UsageError("--grid: expected KEY=V1,V2,..., found '" + g + "'");
  }
  Axis a{g.substr(0, eq), {}};
  std::stringstream ss(g.substr(eq + 1));
  for (std::string v; std::getline(ss, v, ',');) {
    if (!v.empty()) a.values.push_back(v);
  }
  if (a.values.empty()) throw UsageError("--grid " + a.key + ": no values");
  return a;
}

// Point i of the grid: the first axis varies slowest.
std::vector<std::pair<std::string, std::string>> point(const std::vector<Axis>& grid, std::size_t i) {
  std::vector<std::pair<std::string, std::string>> p(grid.size());
  for (std::size_t a = grid.size(); a-- > 0;) {
    p[a] = {grid[a].key, grid[a].values[i % grid[a].values.size()]};
    i /= grid[a].values.size();
  }
  return p;
}

std::string point_name(std::size_t i) { return fmt::format("p{:04}", i); }

// Writes `text` to `path` through a temporary file in the same folder and a rename, so
// a reader (or a crash) never sees half a file.
void write_atomically(const fs::path& path, const std::string& text) {
  // (The process id in the temporary name: sweeps of several machines may share a folder.)
  const fs::path tmp = path.parent_path() / fmt::format("{}.{}.tmp", path.filename().string(), ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw UsageError(fmt::format("cannot write {}", tmp.string()));
  }
  fs::rename(tmp, path);
}

// A point file: its JSON, or nothing (with the reason) when it is not a whole point.
std::optional<json> read_point(const fs::path& path, std::string& problem) {
  std::ifstream in(path);
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    problem = "not valid JSON (truncated or corrupt)";
    return std::nullopt;
  }
  if (!j.contains("point") || !j["point"].is_number_unsigned() || !j.contains("sweep") || !j.contains("status")) {
    problem = "not a sweep point (no point, sweep or status)";
    return std::nullopt;
  }
  return j;
}

bool is_point_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return p.extension() == ".json" && name.size() > 1 && name[0] == 'p' && name != "sweep.json";
}

const std::vector<std::string> kCsvMetrics = {"time_us", "cycles", "dram_read_bytes", "dram_write_bytes",
                                               "ring_link_bytes", "macs", "roofline_fraction",
                                               "compute_utilisation", "vector_utilisation", "achieved_flops_per_s",
                                               "energy_j", "cpu_fallbacks"};

std::string csv_field(std::string s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c == '\n' ? ' ' : c);
  return q + "\"";
}

// The merged CSV of every point JSON in `dir`, rows in point order.
void write_csv(const fs::path& dir) {
  std::map<std::size_t, json> points;
  json sweep = json::object();  // the manifest's, else the points'
  if (std::ifstream in(dir / "sweep.json"); in) {
    const json manifest = json::parse(in, nullptr, false);
    if (manifest.is_object()) sweep = manifest;
  }
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!is_point_file(e.path())) continue;
    std::string problem;
    auto point = read_point(e.path(), problem);
    if (!point) {
      std::fprintf(stderr, "spyre-sim: %s: %s; left out of sweep.csv\n", e.path().c_str(), problem.c_str());
      continue;
    }
    json& j = *point;
    if (sweep.empty()) sweep = j["sweep"];
    const auto index = j["point"].get<std::size_t>();
    points.emplace(index, std::move(j));
  }
  std::ostringstream out;
  std::vector<std::string> keys;
  for (const auto& a : sweep.value("grid", json::array())) keys.push_back(a[0].get<std::string>());
  out << "point,status";
  for (const auto& k : keys) out << "," << csv_field(k);
  for (const auto& m : kCsvMetrics) out << "," << m;
  out << ",error\n";
  for (const auto& [i, j] : points) {
    out << point_name(i) << "," << j.value("status", "?");
    for (const auto& k : keys) out << "," << csv_field(j["params"].value(k, ""));
    const json m = j.contains("result") ? j["result"].value("metrics", json::object()) : json::object();
    for (const auto& k : kCsvMetrics) out << "," << (m.contains(k) ? m[k].dump() : "");
    out << "," << csv_field(j.value("error", "")) << "\n";
  }
  write_atomically(dir / "sweep.csv", out.str());
}

std::string tail(const fs::path& file, std::size_t lines) {
  std::ifstream in(file);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string r;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) r += all[i] + "\n";
  return r.empty() ? r : r.substr(0, r.size() - 1);
}

struct SweepOptions {
  std::string workload;
  std::vector<std::string> grid;
  std::string config;
  std::vector<std::string> sets;
  int jobs = 1;
  double timeout = 600;
  std::string shard = "1/1";
  std::string out;
};

volatile std::sig_atomic_t g_stop = 0;  // the signal that stopped the sweep, or 0

// SIGINT/SIGTERM/SIGHUP only record themselves (g_stop) while a sweep runs; the previous
// handlers come back when it ends, however it ends.
class SignalGuard {
 public:
  SignalGuard() {
    g_stop = 0;
    struct sigaction action {};
    action.sa_handler = [](int sig) { g_stop = sig; };
    sigemptyset(&action.sa_mask);
    for (int k = 0; k < 3; ++k) sigaction(kSignals[k], &action, &previous_[k]);
  }
  ~SignalGuard() {
    for (int k = 0; k < 3; ++k) sigaction(kSignals[k], &previous_[k], nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction previous_[3];
};

struct Running {
  pid_t pid;
  std::size_t index;
  Clock::time_point start;
};

int sweep(const SweepOptions& o) {
  if (o.jobs < 1) throw UsageError("--jobs must be at least 1");
  std::vector<Axis> grid;
  for (const auto& g : o.grid) grid.push_back(parse_axis(g));
  std::size_t total = 1;
  for (const auto& a : grid) total *= a.values.size();
  std::size_t shard_i = 1, shard_n = 1;
  if (std::sscanf(o.shard.c_str(), "%zu/%zu", &shard_i, &shard_n) != 2 || shard_n == 0 || shard_i == 0 ||
      shard_i > shard_n) {
    throw UsageError("--shard: expected I/N with 1 <= I <= N, found '" + o.shard + "'");
  }
  const fs::path dir(o.out);
  fs::create_directories(dir);
  json sweep_desc = {{"workload", o.workload}, {"points", total}, {"grid", json::array()},
                     {"config", o.config}, {"set", o.sets}};
  for (const auto& a : grid) sweep_desc["grid"].push_back(json::array({a.key, a.values}));
  // The folder belongs to one sweep: its manifest (and every point in it) must match,
  // or resuming would keep another sweep's rows.
  const fs::path manifest = dir / "sweep.json";
  if (fs::exists(manifest)) {
    std::ifstream in(manifest);
    const json old = json::parse(in, nullptr, false);
    if (!old.is_discarded() && old != sweep_desc) {
      throw UsageError(fmt::format("--out {} holds another sweep ({}); expected ({}); use a new folder",
                                   o.out, old.dump(), sweep_desc.dump()));
    }
  }
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!is_point_file(e.path())) continue;
    std::string problem;
    const auto p = read_point(e.path(), problem);
    if (p && (*p)["sweep"] != sweep_desc) {
      throw UsageError(fmt::format("--out {} holds {} of another sweep ({}); expected ({}); use a new folder", o.out,
                                   e.path().filename().string(), (*p)["sweep"].dump(), sweep_desc.dump()));
    }
  }
  write_atomically(manifest, sweep_desc.dump(2) + "\n");

  std::vector<std::size_t> todo;
  std::size_t skipped = 0;
  for (std::size_t i = 0; i < total; ++i) {
    if (i % shard_n != shard_i - 1) continue;
    const fs::path file = dir / (point_name(i) + ".json");
    if (fs::exists(file)) {
      std::string problem;
      if (read_point(file, problem)) {
        ++skipped;
        continue;
      }
      std::fprintf(stderr, "spyre-sim sweep: %s: %s; running the point again\n", file.c_str(), problem.c_str());
    }
    todo.push_back(i);
  }
  std::fprintf(stderr, "spyre-sim sweep: %zu points (shard %zu/%zu: %zu to run, %zu already in %s)\n", total, shard_i,
               shard_n, todo.size(), skipped, o.out.c_str());

  const std::string self = fs::read_symlink("/proc/self/exe");
  std::vector<Running> running;
  std::size_t next = 0, done = 0, failed = 0;
  bool forwarded = false;
  const auto started = Clock::now();
  const auto finish = [&](const Running& r, int status, bool timed_out, bool interrupted = false) {
    const auto [idx, name] = std::pair{r.index, point_name(r.index)};
    const fs::path tmp = dir / (name + ".out"), log = dir / (name + ".log");
    json j = {{"point", idx}, {"sweep", sweep_desc}, {"params", json::object()}};
    for (const auto& [k, v] : point(grid, idx)) j["params"][k] = v;
    const double secs = std::chrono::duration<double>(Clock::now() - r.start).count();
    j["seconds"] = secs;
    std::ifstream in(tmp);
    json result = json::parse(in, nullptr, false);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (!timed_out && code == 0 && !result.is_discarded()) {
      j["status"] = "ok";
      j["result"] = result;
    } else {
      ++failed;
      j["status"] = "failed";
      j["exit_code"] = code;
      j["error"] = timed_out     ? fmt::format("timed out after {} s", o.timeout)
                   : interrupted ? std::string("interrupted (the sweep was stopped by a signal); rerun to resume")
                                 : tail(log, 3);
    }
    if (interrupted) {
      // Not recorded as a point: a rerun into the same folder runs it again.
      fs::remove(tmp);
      std::fprintf(stderr, "spyre-sim sweep: %s interrupted; it will run again on resume\n", name.c_str());
      return;
    }
    write_atomically(dir / (name + ".json"), j.dump(2) + "\n");
    fs::remove(tmp);
    ++done;
    const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
    const double eta = elapsed / static_cast<double>(done) * static_cast<double>(todo.size() - done);
    std::string params;
    for (const auto& [k, v] : point(grid, idx)) params += fmt::format(" {}={}", k, v);
    std::fprintf(stderr, "[%zu/%zu] %s%s: %s in %.1f s; ETA %.0f s\n", done, todo.size(), name.c_str(),
                 params.c_str(), j["status"].get<std::string>().c_str(), secs, eta);
  };
  // SIGINT/SIGTERM/SIGHUP: stop starting points, pass the signal on to the running
  // ones, wait for them, record what finished, write the CSV, exit 130.
  // Both undone on every way out (an exception included): the handlers restored, and
  // children still running stopped and reaped, their partial output removed.
  const SignalGuard signals;
  struct Reaper {
    std::vector<Running>& running;
    const fs::path& dir;
    ~Reaper() {
      for (const auto& r : running) kill(r.pid, SIGTERM);
      for (const auto& r : running) {
        int status = 0;
        waitpid(r.pid, &status, 0);
        std::error_code ec;
        fs::remove(dir / (point_name(r.index) + ".out"), ec);
      }
    }
  } reaper{running, dir};
  while (done < todo.size() && !(g_stop != 0 && running.empty())) {
    while (g_stop == 0 && next < todo.size() && running.size() < static_cast<std::size_t>(o.jobs)) {
      const std::size_t idx = todo[next++];
      std::vector<std::string> args = {self, "run", "--workload", o.workload, "--json"};
      std::string config = o.config;
      std::vector<std::string> sets = o.sets;
      for (const auto& [k, v] : point(grid, idx)) {
        if (k == "config") {
          config = v;
        } else {
          sets.push_back(k + "=" + v);
        }
      }
      if (!config.empty()) args.insert(args.end(), {"--config", config});
      for (const auto& s : sets) args.insert(args.end(), {"--set", s});
      const pid_t pid = fork();
      if (pid == 0) {
        const int out = ::open((dir / (point_name(idx) + ".out")).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int err = ::open((dir / (point_name(idx) + ".log")).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(out, 1);
        dup2(err, 2);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(self.c_str(), argv.data());
        _exit(127);
      }
      if (pid < 0) throw std::runtime_error("fork failed");
      running.push_back({pid, idx, Clock::now()});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (g_stop != 0 && !forwarded) {
      forwarded = true;
      for (const auto& r : running) kill(r.pid, g_stop);
    }
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      const pid_t r = waitpid(it->pid, &status, WNOHANG);
      const bool late = std::chrono::duration<double>(Clock::now() - it->start).count() > o.timeout;
      if (r == 0 && late) {
        kill(it->pid, SIGKILL);
        waitpid(it->pid, &status, 0);
        finish(*it, status, true);
        it = running.erase(it);
      } else if (r == it->pid) {
        const bool killed_by_us = forwarded && WIFSIGNALED(status) && WTERMSIG(status) == g_stop;
        finish(*it, status, false, killed_by_us || (forwarded && WIFEXITED(status) && WEXITSTATUS(status) != 0));
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }
  write_csv(dir);
  if (g_stop != 0) {
    std::fprintf(stderr, "spyre-sim sweep: stopped by signal %d after %zu of %zu points; rerun the same command to "
                 "resume (results so far in %s/)\n", static_cast<int>(g_stop), done, todo.size(), o.out.c_str());
    return kExitInterrupted;
  }
  std::fprintf(stderr, "spyre-sim sweep: %zu run, %zu failed; results in %s/ (one JSON per point, sweep.csv)\n",
               todo.size(), failed, o.out.c_str());
  return failed == 0 ? kExitSuccess : kExitRegression;
}

int merge(const std::vector<std::string>& dirs, const std::string& out) {
  for (const auto& d : dirs) {
    if (!fs::is_directory(d)) throw UsageError(fmt::format("sweep-merge: {} is not a sweep folder (no such folder)", d));
  }
  const fs::path target(out.empty() ? dirs.front() : out);
  json desc;
  std::vector<fs::path> copies;
  for (const auto& d : dirs) {
    for (const auto& e : fs::directory_iterator(d)) {
      if (!is_point_file(e.path())) continue;
      std::string problem;
      const auto j = read_point(e.path(), problem);
      if (!j) throw UsageError(fmt::format("sweep-merge: {}: {}; rerun that shard to redo it", e.path().string(), problem));
      if (desc.is_null()) desc = (*j)["sweep"];
      if ((*j)["sweep"] != desc) {
        throw UsageError(fmt::format("{} belongs to another sweep (workload or grid differ)", e.path().string()));
      }
      copies.push_back(e.path());
    }
  }
  if (desc.is_null()) throw UsageError("sweep-merge: no sweep points in " + fmt::format("{}", fmt::join(dirs, ", ")));
  fs::create_directories(target);
  for (const auto& path : copies) {
    if (fs::weakly_canonical(path.parent_path()) != fs::weakly_canonical(target)) {
      fs::copy_file(path, target / path.filename(), fs::copy_options::overwrite_existing);
    }
  }
  write_atomically(target / "sweep.json", desc.dump(2) + "\n");
  write_csv(target);
  std::fprintf(stderr, "spyre-sim sweep-merge: %s/sweep.csv\n", target.c_str());
  return kExitSuccess;
}

}  // namespace

void add_sweep_commands(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SweepOptions>();
  CLI::App* cmd = app.add_subcommand("sweep", "run a workload over a grid of configs, one process per point");
  cmd->add_option("--workload", o->workload, "as for spyre-sim run")->required();
  cmd->add_option("--grid", o->grid, "KEY=V1,V2,... (a config key, or config=a.yaml,b.yaml); repeatable")
      ->required();
  cmd->add_option("--config", o->config, "base chip config for every point");
  cmd->add_option("--set", o->sets, "base override for every point (repeatable)");
  cmd->add_option("--jobs", o->jobs, "points run in parallel (default 1)");
  cmd->add_option("--timeout", o->timeout, "seconds per point before it is killed and recorded as failed");
  cmd->add_option("--shard", o->shard, "I/N: run only points with index % N == I - 1 (job arrays)");
  cmd->add_option("--out", o->out, "directory for the point JSONs and sweep.csv")->required();
  cmd->callback([o, &exit_code] { exit_code = sweep(*o); });
  auto dirs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  CLI::App* m = app.add_subcommand("sweep-merge", "join sweep shards (directories) into one directory and CSV");
  m->add_option("dirs", *dirs, "shard directories")->required();
  m->add_option("--out", *out, "merged directory (default: the first)");
  m->callback([dirs, out, &exit_code] { exit_code = merge(*dirs, *out); });
}

}  // namespace spyre::tools
