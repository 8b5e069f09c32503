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
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
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
  json sweep;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json" || e.path().filename().string().rfind('p', 0) != 0) continue;
    std::ifstream in(e.path());
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("point")) continue;
    sweep = j["sweep"];
    const auto index = j["point"].get<std::size_t>();
    points.emplace(index, std::move(j));
  }
  std::ofstream out(dir / "sweep.csv");
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

  std::vector<std::size_t> todo;
  std::size_t skipped = 0;
  for (std::size_t i = 0; i < total; ++i) {
    if (i % shard_n != shard_i - 1) continue;
    if (fs::exists(dir / (point_name(i) + ".json"))) {
      ++skipped;
      continue;
    }
    todo.push_back(i);
  }
  std::fprintf(stderr, "spyre-sim sweep: %zu points (shard %zu/%zu: %zu to run, %zu already in %s)\n", total, shard_i,
               shard_n, todo.size(), skipped, o.out.c_str());

  const std::string self = fs::read_symlink("/proc/self/exe");
  std::vector<Running> running;
  std::size_t next = 0, done = 0, failed = 0;
  const auto started = Clock::now();
  const auto finish = [&](const Running& r, int status, bool timed_out) {
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
      j["error"] = timed_out ? fmt::format("timed out after {} s", o.timeout) : tail(log, 3);
    }
    std::ofstream(dir / (name + ".json")) << j.dump(2) << "\n";
    fs::remove(tmp);
    ++done;
    const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
    const double eta = elapsed / static_cast<double>(done) * static_cast<double>(todo.size() - done);
    std::string params;
    for (const auto& [k, v] : point(grid, idx)) params += fmt::format(" {}={}", k, v);
    std::fprintf(stderr, "[%zu/%zu] %s%s: %s in %.1f s; ETA %.0f s\n", done, todo.size(), name.c_str(),
                 params.c_str(), j["status"].get<std::string>().c_str(), secs, eta);
  };
  while (done < todo.size()) {
    while (next < todo.size() && running.size() < static_cast<std::size_t>(o.jobs)) {
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
        finish(*it, status, false);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }
  write_csv(dir);
  std::fprintf(stderr, "spyre-sim sweep: %zu run, %zu failed; results in %s/ (one JSON per point, sweep.csv)\n",
               todo.size(), failed, o.out.c_str());
  return failed == 0 ? kExitSuccess : kExitRegression;
}

int merge(const std::vector<std::string>& dirs, const std::string& out) {
  const fs::path target(out.empty() ? dirs.front() : out);
  fs::create_directories(target);
  json desc;
  for (const auto& d : dirs) {
    for (const auto& e : fs::directory_iterator(d)) {
      const std::string name = e.path().filename().string();
      if (e.path().extension() != ".json" || name.rfind('p', 0) != 0) continue;
      std::ifstream in(e.path());
      const json j = json::parse(in, nullptr, false);
      if (j.is_discarded() || !j.contains("sweep")) continue;
      if (desc.is_null()) desc = j["sweep"];
      if (j["sweep"] != desc) {
        throw UsageError(fmt::format("{} belongs to another sweep (workload or grid differ)", e.path().string()));
      }
      if (fs::weakly_canonical(e.path().parent_path()) != fs::weakly_canonical(target)) {
        fs::copy_file(e.path(), target / name, fs::copy_options::overwrite_existing);
      }
    }
  }
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
  cmd->callback([o, &exit_code] {
    try {
      exit_code = sweep(*o);
    } catch (const UsageError& e) {
      std::fprintf(stderr, "spyre-sim: %s\n", e.what());
      exit_code = kExitUsage;
    }
  });
  auto dirs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  CLI::App* m = app.add_subcommand("sweep-merge", "join sweep shards (directories) into one directory and CSV");
  m->add_option("dirs", *dirs, "shard directories")->required();
  m->add_option("--out", *out, "merged directory (default: the first)");
  m->callback([dirs, out, &exit_code] {
    try {
      exit_code = merge(*dirs, *out);
    } catch (const UsageError& e) {
      std::fprintf(stderr, "spyre-sim: %s\n", e.what());
      exit_code = kExitUsage;
    }
  });
}

}  // namespace spyre::tools
