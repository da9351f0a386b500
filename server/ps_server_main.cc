// ps_server: one shard of a ShardPS parameter server. Flags live here only;
// they become ServerOptions and HostOptions and nothing else reads them.
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/command_line.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/mutex_tuning.h"
#include "common/reconnect_args.h"
#include "common/shutdown_signal.h"
#include "server/parameter_server.h"
#include "common/trace.h"
#include "server/grpc_replica_link.h"
#include "server/ps_server_host.h"
#include "server/replica_joiner.h"
#include "server/view_metadata.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, bind_address, "0.0.0.0", "Address to listen on.");
ABSL_FLAG(int, port, 0, "gRPC port; 0 picks a free one (logged).");
ABSL_FLAG(int, server_id, 0, "This server's id in [0, num_servers).");
ABSL_FLAG(int, num_servers, 1, "Servers in the job.");
ABSL_FLAG(int, num_workers, 1, "Workers in the job.");
ABSL_FLAG(std::string, mode, "sync", "Consistency: sync (BSP), async (ASP) or ssp (bounded staleness).");
ABSL_FLAG(int, staleness, 0, "ssp: a pull at clock c waits until the slowest live worker is at c - staleness.");
ABSL_FLAG(int, replicas, 1,
          "Copies of every key on distinct servers: 1, or 2 (a backup on the next server takes over, with no "
          "step lost, when its primary fails; docs/failures.md).");
ABSL_FLAG(absl::Duration, server_timeout_for_failover, absl::Seconds(3),
          "With --replicas > 1: how long this server retries its backup before taking it for failed (its keys then "
          "have a single copy).");
ABSL_FLAG(absl::Duration, peer_connect_timeout, shardps::kConnectTimeout,
          "With --replicas > 1: how long this server's attempt to connect to another server may take, TCP, TLS and "
          "HTTP/2 handshakes together: its link to its backup (which also carries the keys it copies to a joining "
          "server) and, when it joins, its calls to the others; failed attempts are retried until "
          "--server_timeout_for_failover. Raise it on every server where handshakes take longer (a long round trip, "
          "TLS on a busy host); at most 20s.");
ABSL_FLAG(std::string, join, "",
          "With --replicas > 1: every server's address, in id order (host:port,...): this server joins the running "
          "job in --server_id's place (a restart, or a spare), has its keys copied from the servers that serve "
          "them while the job runs, then backs them up again, restoring no checkpoint (docs/failures.md). Its own "
          "entry is where the others reach it: a spare on another machine names its own address there, and every "
          "server and worker learns it and calls it there. When no other server runs the job (a new job, or all of "
          "them restarting) it starts as usual.");
ABSL_FLAG(int64_t, partition_bytes, shardps::kDefaultPartitionBytes, "Largest chunk (key) in bytes; a multiple of 4.");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd, adam, adamw or adagrad.");
ABSL_FLAG(std::string, async_lr_scaling, "auto",
          "async and ssp: workers (a push is 1/num_workers of a step: lr/N, the schedule once per N pushes, "
          "optimizer state kept per step; the same flags then mean the same in every mode), none (every push "
          "is a whole step), or auto (none for AdaGrad, dense and rows, whose lr/N would be lr/sqrt(N) against "
          "sync; workers for the other optimizers).");
ABSL_FLAG(std::string, staleness_lr, "capped",
          "async and ssp: none; inverse (a push's learning rate is lr / (1 + its staleness), the updates of the "
          "key since the version the push was computed from, in place of lr / num_workers); or capped (lr / "
          "num_workers times min(1, num_workers / (1 + staleness)): only pushes staler than a round of the other "
          "workers are damped).");
ABSL_FLAG(std::string, momentum_lookahead, "auto",
          "async and ssp, sgd with momentum: the served weights lead the momentum by this many updates, so a push "
          "computed on older weights fits the weights it is applied to; auto: 2 x (num_workers - 1) there (none "
          "in sync, with nesterov, or without momentum); none: 0.");
ABSL_FLAG(int64_t, staleness_log_every, 1000, "async and ssp: steps between staleness log lines (0: none).");
ABSL_FLAG(double, lr, 0.1, "Base learning rate.");
ABSL_FLAG(double, momentum, 0.0, "SGD momentum in [0, 1).");
ABSL_FLAG(bool, nesterov, false, "SGD: Nesterov momentum (needs --momentum > 0).");
ABSL_FLAG(double, weight_decay, 0.0, "L2 penalty (sgd, adam, adagrad) or decoupled decay (adamw).");
ABSL_FLAG(double, beta1, 0.9, "Adam/AdamW first-moment decay.");
ABSL_FLAG(double, beta2, 0.999, "Adam/AdamW second-moment decay.");
ABSL_FLAG(double, epsilon, 1e-8, "Adam/AdamW/AdaGrad denominator term.");
ABSL_FLAG(std::string, lr_schedule, "constant", "constant, step or cosine.");
ABSL_FLAG(int64_t, lr_warmup_steps, 0, "Linear warm-up steps (0: none).");
ABSL_FLAG(int64_t, lr_step_size, 1000, "step schedule: steps between decays.");
ABSL_FLAG(double, lr_gamma, 0.1, "step schedule: decay factor.");
ABSL_FLAG(int64_t, lr_total_steps, 10000, "cosine schedule: steps from lr down to lr_min.");
ABSL_FLAG(double, lr_min, 0.0, "cosine schedule: final learning rate.");
ABSL_FLAG(int64_t, row_ttl_steps, 0,
          "Sparse tables: drop rows not read or updated for this many steps (they come back as new rows if "
          "seen again); 0: keep every row.");
ABSL_FLAG(int, row_admit_count, 0,
          "Sparse tables: store a row only once its id has been pushed this many times; before that it reads as "
          "its initial row and its gradients are dropped (0 or 1: store every row at first touch).");
ABSL_FLAG(std::string, checkpoint_dir, "", "Directory for shard checkpoints; empty: none. Restored on start.");
ABSL_FLAG(int64_t, checkpoint_every, 0,
          "Write a checkpoint every this many steps (0: not by steps). A sync or ssp job that loses a server "
          "goes back at most this far.");
ABSL_FLAG(absl::Duration, checkpoint_every_seconds, absl::ZeroDuration(),
          "Write a checkpoint at this interval, e.g. 60s (0: not by time). In sync and ssp every server takes the "
          "step the first whose interval ends announces.");
ABSL_FLAG(int, checkpoints_to_keep, 2, "Checkpoints kept on disk, newest first (at least 2 in sync and ssp, for rewinds).");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(30),
          "A worker silent for longer is declared dead and sync steps go on without it.");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(2), "Heartbeat interval told to workers.");
ABSL_FLAG(int, metrics_port, -1, "Prometheus /metrics port; -1: off, 0: pick one (logged).");
ABSL_FLAG(int, health_port, -1,
          "A plaintext port serving only the gRPC health service, for probes that cannot speak TLS "
          "(Kubernetes' grpc probes); -1: off, 0: pick one (logged).");
ABSL_FLAG(bool, http2_bdp_probe, true,
          "gRPC's bandwidth-delay probe on the connections this server accepts: a PING per burst of data received, "
          "to grow the window. Off saves CPU with many workers; on moves bulk tensors faster over few connections "
          "(docs/performance.md).");
ABSL_FLAG(std::string, tcp_congestion, shardps::kDefaultTcpCongestion,
          "TCP congestion control of the connections this server accepts (cubic, reno, bbr, ... as the kernel "
          "allows; system: the machine's default; auto: cubic where this process may set it, else the machine's). "
          "On the emulated cluster CUBIC beats BBR at 8 workers (README \"Scaling\").");
ABSL_FLAG(int, socket_priority, shardps::kBulkSocketPriority,
          "SO_PRIORITY of the connections this server accepts. The default, 2 (TC_PRIO_BULK), puts its answers in "
          "the lowest band of a queueing discipline that honors priority (pfifo_fast, Debian's default; prio), so on "
          "a host it shares with a worker they yield to that worker's pushes and requests (README \"Scaling\"). "
          "0: the machine's default band; -1: leave the sockets alone.");
ABSL_FLAG(int64_t, max_message_bytes, 256 << 20, "Largest gRPC message accepted or sent.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate (chain) of this server; with --tls_key, TLS on every channel.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "", "PEM certificate of the CA that signs the job's certificates (verifies clients with --tls_mutual).");
ABSL_FLAG(bool, tls_mutual, false, "Require clients to present a certificate signed by --tls_ca.");
ABSL_FLAG(std::string, auth_token_file, "",
          "A file holding the job token; every call must carry it (UNAUTHENTICATED otherwise). Empty: none.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error, critical or off.");
ABSL_FLAG(std::string, trace_file, "",
          "Write a Chrome/Perfetto trace (JSON) of every push arriving, apply and pull answered here at shutdown. "
          "Empty: none.");

namespace shardps {
namespace {

std::vector<std::string> JoinAddresses() {
  return absl::StrSplit(absl::GetFlag(FLAGS_join), ',', absl::SkipEmpty());
}

absl::StatusOr<ServerOptions> OptionsFromFlags() {
  ServerOptions o;
  o.server_id = absl::GetFlag(FLAGS_server_id);
  absl::StatusOr<Mode> mode = ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return mode.status();
  o.job.mode = *mode;
  o.job.staleness = absl::GetFlag(FLAGS_staleness);
  o.job.num_servers = absl::GetFlag(FLAGS_num_servers);
  o.job.num_workers = absl::GetFlag(FLAGS_num_workers);
  o.job.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  o.job.replicas = absl::GetFlag(FLAGS_replicas);
  absl::StatusOr<OptimizerKind> kind = ParseOptimizer(absl::GetFlag(FLAGS_optimizer));
  if (!kind.ok()) return kind.status();
  o.optimizer.kind = *kind;
  absl::StatusOr<AsyncLrScaling> scaling = ParseAsyncLrScaling(absl::GetFlag(FLAGS_async_lr_scaling));
  if (!scaling.ok()) return scaling.status();
  o.async_lr_scaling = *scaling;
  absl::StatusOr<StalenessLr> staleness_lr = ParseStalenessLr(absl::GetFlag(FLAGS_staleness_lr));
  if (!staleness_lr.ok()) return staleness_lr.status();
  o.staleness_lr = *staleness_lr;
  absl::StatusOr<double> lookahead = ParseMomentumLookahead(absl::GetFlag(FLAGS_momentum_lookahead));
  if (!lookahead.ok()) return lookahead.status();
  o.momentum_lookahead = *lookahead;
  o.staleness_log_every = absl::GetFlag(FLAGS_staleness_log_every);
  o.optimizer.lr = absl::GetFlag(FLAGS_lr);
  o.optimizer.momentum = absl::GetFlag(FLAGS_momentum);
  o.optimizer.nesterov = absl::GetFlag(FLAGS_nesterov);
  o.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.optimizer.beta1 = absl::GetFlag(FLAGS_beta1);
  o.optimizer.beta2 = absl::GetFlag(FLAGS_beta2);
  o.optimizer.epsilon = absl::GetFlag(FLAGS_epsilon);
  absl::StatusOr<LrScheduleKind> schedule = ParseLrSchedule(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) return schedule.status();
  o.optimizer.schedule.kind = *schedule;
  o.optimizer.schedule.warmup_steps = absl::GetFlag(FLAGS_lr_warmup_steps);
  o.optimizer.schedule.step_size = absl::GetFlag(FLAGS_lr_step_size);
  o.optimizer.schedule.gamma = absl::GetFlag(FLAGS_lr_gamma);
  o.optimizer.schedule.total_steps = absl::GetFlag(FLAGS_lr_total_steps);
  o.optimizer.schedule.min_lr = absl::GetFlag(FLAGS_lr_min);
  o.join = !absl::GetFlag(FLAGS_join).empty();
  if (o.join && o.job.replicas < 2) return absl::InvalidArgumentError("--join needs --replicas=2 or more");
  if (o.join && static_cast<int>(JoinAddresses().size()) != o.job.num_servers) {
    return absl::InvalidArgumentError(absl::StrCat("--join names ", JoinAddresses().size(),
                                                   " addresses; the job has ", o.job.num_servers, " servers"));
  }
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every);
  o.row_ttl_steps = absl::GetFlag(FLAGS_row_ttl_steps);
  o.row_admit_count = absl::GetFlag(FLAGS_row_admit_count);
  o.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  o.checkpoint_every_interval = absl::GetFlag(FLAGS_checkpoint_every_seconds);
  o.checkpoints_to_keep = absl::GetFlag(FLAGS_checkpoints_to_keep);
  o.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  o.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  return o;
}

// Exits 0 when a signal came during start-up (logged), else -1 to go on.
int StoppedDuringStartUp(ShutdownSignal& signal, const char* phase) {
  if (!signal.received()) return -1;
  spdlog::info("signal {} received {}: exiting before serving", signal.Wait(), phase);
  return 0;
}

// The link that forwards this server's updates to its backups, from the
// flags; warns where the connect timeout leaves a handshake no time.
absl::StatusOr<std::unique_ptr<GrpcReplicaLink>> MakeReplicaLink(const TlsFiles& tls, const std::string& token) {
  const absl::Duration failover = absl::GetFlag(FLAGS_server_timeout_for_failover);
  const absl::Duration connect = absl::GetFlag(FLAGS_peer_connect_timeout);
  if (connect >= failover) {
    spdlog::warn("--peer_connect_timeout {} is not below --server_timeout_for_failover {}: a backup whose "
                 "handshake takes that long is taken for failed before it connects",
                 absl::FormatDuration(connect), absl::FormatDuration(failover));
  }
  return GrpcReplicaLink::Create(
      ReplicaLinkOptions{failover, failover / 2, connect, tls, token, absl::GetFlag(FLAGS_max_message_bytes)});
}

int Run(ShutdownSignal& signal) {
  if (absl::Status s = SetUpLogging(absl::GetFlag(FLAGS_log_level),
                                    "server " + std::to_string(absl::GetFlag(FLAGS_server_id)));
      !s.ok()) {
    fprintf(stderr, "ps_server: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<ServerOptions> options = OptionsFromFlags();
  if (options.ok()) {
    if (absl::Status valid = CheckPeerConnectTimeout(absl::GetFlag(FLAGS_peer_connect_timeout)); !valid.ok()) {
      options = valid;
    }
  }
  if (!options.ok()) {
    spdlog::critical("bad flags: {}", std::string(options.status().message()));
    return 2;
  }
  if (int code = StoppedDuringStartUp(signal, "before start-up"); code >= 0) return code;
  const std::string trace_file = absl::GetFlag(FLAGS_trace_file);
  std::unique_ptr<Trace> trace;
  if (!trace_file.empty()) trace = std::make_unique<Trace>(absl::StrCat("ps_server ", options->server_id));
  options->trace = trace.get();
  const TlsFiles tls{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca),
                     absl::GetFlag(FLAGS_tls_mutual)};
  absl::StatusOr<std::string> token = ReadAuthToken(absl::GetFlag(FLAGS_auth_token_file));
  if (!token.ok()) {
    spdlog::critical("cannot start: {}", std::string(token.status().message()));
    return 1;
  }
  // Declared before the host, so that it is reset explicitly before the
  // host's core goes (its callbacks call into the core).
  std::unique_ptr<GrpcReplicaLink> link;
  if (options->job.replicas > 1) {
    absl::StatusOr<std::unique_ptr<GrpcReplicaLink>> made = MakeReplicaLink(tls, *token);
    if (!made.ok()) {
      spdlog::critical("cannot start: {}", std::string(made.status().message()));
      return 1;
    }
    link = *std::move(made);
    options->replica_link = link.get();
    if (options->join) link->SetPeers(JoinAddresses());
  }
  // --join joins a job that runs; with none running (a new job, or every
  // server restarting) the server starts as usual, restoring its checkpoint.
  const bool join_flag = options->join;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> peer_credentials = MakeChannelCredentials(tls);
  if (!peer_credentials.ok()) {
    spdlog::critical("cannot start: {}", std::string(peer_credentials.status().message()));
    return 1;
  }
  if (options->join && !AnyPeerRunsJob(JoinAddresses(), options->server_id, *peer_credentials, *token,
                                       absl::Seconds(2))) {
    spdlog::info("--join: no other server of the job runs it (a new job, or all of them restarting): starting as "
                 "usual");
    options->join = false;
  }
  RealClock clock;
  absl::StatusOr<std::unique_ptr<ParameterServer>> core = ParameterServer::Create(*options, &clock);
  if (!core.ok()) {
    spdlog::critical("cannot start: {}", std::string(core.status().message()));
    return 1;
  }
  if (int code = StoppedDuringStartUp(signal, "while restoring"); code >= 0) return code;
  ParameterServer* const served = core->get();  // the host owns it from here on, and outlives the link
  if (link != nullptr) {
    link->SetViewExchange([served] { return ViewMetadata(*served); },
                          [served](const ReceivedMetadata& trailing) { NoteViewMetadata(trailing, *served); });
  }
  HostOptions host_options;
  host_options.address = absl::GetFlag(FLAGS_bind_address);
  host_options.port = absl::GetFlag(FLAGS_port);
  host_options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  host_options.health_port = absl::GetFlag(FLAGS_health_port);
  host_options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  host_options.tcp_congestion = absl::GetFlag(FLAGS_tcp_congestion);
  host_options.http2_bdp_probe = absl::GetFlag(FLAGS_http2_bdp_probe);
  host_options.socket_priority = absl::GetFlag(FLAGS_socket_priority);
  host_options.tls = tls;
  host_options.auth_token = *token;
  host_options.on_admin_stop = [&signal] { signal.Request(); };
  host_options.trace = trace.get();
  absl::StatusOr<std::unique_ptr<PsServerHost>> host = PsServerHost::Start(host_options, *std::move(core), &clock);
  if (!host.ok()) {
    spdlog::critical("cannot start: {}", std::string(host.status().message()));
    return 1;
  }
  // Joins the job at start with --join, and again whenever this server steps down while it lives.
  std::unique_ptr<ReplicaJoiner> joiner;
  if (options->job.replicas > 1) {
    ReplicaJoinerOptions j;
    if (join_flag) j.peers = JoinAddresses();
    j.join_at_start = options->join;
    j.credentials = *peer_credentials;
    j.auth_token = *token;
    j.connect_timeout = absl::GetFlag(FLAGS_peer_connect_timeout);
    joiner = std::make_unique<ReplicaJoiner>(served, j);
  }
  // Launchers read this line to learn the port.
  printf("LISTENING port=%d metrics_port=%d health_port=%d\n", (*host)->port(), (*host)->metrics_port(),
         (*host)->health_port());
  fflush(stdout);
  const int received = signal.Wait();
  spdlog::info("{}: shutting down", received != 0 ? absl::StrCat("signal ", received, " received") : "stop requested");
  joiner.reset();
  (*host)->Shutdown();
  link.reset();  // joins its senders while the core is still there
  if (trace) {
    host->reset();  // no call records anything after this
    if (absl::Status s = trace->Write(trace_file); !s.ok()) {
      spdlog::error("{}", std::string(s.message()));
      return 1;
    }
    spdlog::info("trace written to {} ({} events)", trace_file, trace->events());
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::ShutdownSignal signal;  // first: before any thread starts
  shardps::KeepFreedMemoryForReuse();
  shardps::SkipMutexDeadlockDetection();
  shardps::ParseJobCommandLine(argc, argv,
                               "ps_server: one shard of a ShardPS parameter server.\n"
                               "  ps_server --flagfile=job.flags --server_id=0 --port=7000",
                               shardps::ForeignFlags::kAnyName);
  return shardps::Run(signal);
}
