/* ShardPS's C API: a worker of a ShardPS job from any language (Python's
 * `shardps` package is plain Python over it with ctypes). It wraps the client
 * library (client/ps_client.h): the same transfers, schedule and recovery as
 * ps_worker, for tensors the caller owns.
 *
 * Conventions (as XGBoost's C API):
 *  - Handles are opaque pointers the API creates and the caller frees with
 *    the matching Free function.
 *  - Every function returns SHARDPS_OK (0), SHARDPS_ERROR (-1), or
 *    SHARDPS_REJOIN (-2): the job asks this worker to line up again (a server
 *    restarted, the job was rewound, or this worker was declared dead). Call
 *    ShardpsClientRegister, which returns the step to continue at.
 *  - On an error, ShardpsLastError() gives the message, in the calling
 *    thread, until that thread's next call.
 *  - Values are float32 arrays in C order holding a whole tensor of the
 *    layout; the client borrows them until the call completes (for
 *    asynchronous calls: until ShardpsCallWait says it is done).
 *
 * Thread-safe: calls on one client may come from several threads. No
 * Python (or other language) headers are involved, so one build serves
 * every interpreter version. */
#ifndef SHARDPS_CLIENT_C_API_H_
#define SHARDPS_CLIENT_C_API_H_

#include <stdint.h>

#ifdef __cplusplus
#define SHARDPS_EXTERN_C extern "C"
#else
#define SHARDPS_EXTERN_C
#endif
#define SHARDPS_DLL SHARDPS_EXTERN_C __attribute__((visibility("default")))

#define SHARDPS_OK 0
#define SHARDPS_ERROR (-1)
#define SHARDPS_REJOIN (-2)

typedef void* ShardpsClientHandle;
typedef void* ShardpsCallHandle;

/* The message of this thread's last error ("" when none). */
SHARDPS_DLL const char* ShardpsLastError(void);
/* Its code, as absl::StatusCode numbers it (gRPC's codes): 9
 * FAILED_PRECONDITION (e.g. the servers are not initialised yet), 3
 * INVALID_ARGUMENT, 14 UNAVAILABLE, 10 ABORTED, ...; 0 when none. */
SHARDPS_DLL int ShardpsLastErrorCode(void);
/* The API's version: 1.0 for this header. */
SHARDPS_DLL int ShardpsVersion(int* major, int* minor);

/* Connects to a job (lazily: no server needs to be up yet). `config` holds
 * `--name=value` options separated by spaces or newlines, a double-quoted part
 * keeping its spaces (client/client_config.h):
 * --servers, --rank, --num_workers, --mode, --staleness, --partition_bytes,
 * --wire_dtype, timeouts, TLS files, --auth_token_file, and --flagfile for the
 * job's flag file. The layout: `num_tensors` tensors named `names`, tensor t
 * having ndims[t] dimensions, all dimensions one after another in `dims`.
 * The layout must be the same on every worker (its hash is checked). */
SHARDPS_DLL int ShardpsClientCreate(const char* config, int num_tensors, const char* const* names,
                                    const int* ndims, const int64_t* dims, ShardpsClientHandle* out);
/* A sparse table of the layout (DESIGN.md, "Sparse tables"): rows of `dim`
 * floats named by int64 ids, created on first touch, uniform in
 * [-init_scale, init_scale] as a function of (name, id, seed) only.
 * `vocab` 0 allows any id; otherwise ids are in [0, vocab). `optimizer` is
 * "sgd", "adagrad", "rowwise_adagrad" or "lazy_adam", with learning rate
 * `lr`; the servers run it. */
typedef struct {
  const char* name;
  int32_t dim;
  int64_t vocab;
  float init_scale;
  const char* optimizer;
  float lr;
  uint64_t seed;
} ShardpsTable;

/* ShardpsClientCreate with `num_tables` sparse tables beside the tensors;
 * table i is named by its index i in the row calls below. */
SHARDPS_DLL int ShardpsClientCreateWithTables(const char* config, int num_tensors, const char* const* names,
                                              const int* ndims, const int64_t* dims, int num_tables,
                                              const ShardpsTable* tables, ShardpsClientHandle* out);

/* Shuts down (calls in flight finish with an error) and frees the client. */
SHARDPS_DLL int ShardpsClientFree(ShardpsClientHandle client);

/* The index of tensor `name` in the layout. */
SHARDPS_DLL int ShardpsTensorIndex(ShardpsClientHandle client, const char* name, int* index);
/* Element count of tensor `index`. */
SHARDPS_DLL int ShardpsTensorSize(ShardpsClientHandle client, int index, int64_t* elements);

/* Joins the job (registers with every server, lining them up after a
 * restart) and sets *step to the step to continue at. */
SHARDPS_DLL int ShardpsClientRegister(ShardpsClientHandle client, int64_t* step);
/* Sends every tensor's initial values (values[t] for tensor t). The first
 * worker's Init wins; *applied is 1 when this one's did. */
SHARDPS_DLL int ShardpsClientInit(ShardpsClientHandle client, const float* const* values, int* applied);

/* Blocking push of the gradients of tensors[0..n) for `step`, and pull of
 * their weights for `step` (sync mode waits for the step's version). */
SHARDPS_DLL int ShardpsPush(ShardpsClientHandle client, int64_t step, int n, const int* tensors,
                            const float* const* values);
SHARDPS_DLL int ShardpsPull(ShardpsClientHandle client, int64_t step, int n, const int* tensors, float* const* out);

/* Asynchronous forms: *call completes later (ShardpsCallWait). */
SHARDPS_DLL int ShardpsPushAsync(ShardpsClientHandle client, int64_t step, int n, const int* tensors,
                                 const float* const* values, ShardpsCallHandle* call);
SHARDPS_DLL int ShardpsPullAsync(ShardpsClientHandle client, int64_t step, int n, const int* tensors,
                                 float* const* out, ShardpsCallHandle* call);
/* Pushes gradients for `step` and pulls the same tensors' weights for
 * step + 1 into `out`, the pull holding its place in the transfer schedule
 * from now on (client/ps_client.h, PushThenPull). */
SHARDPS_DLL int ShardpsPushThenPull(ShardpsClientHandle client, int64_t step, int n, const int* tensors,
                                    const float* const* grads, float* const* out, ShardpsCallHandle* pushed,
                                    ShardpsCallHandle* pulled);

/* Waits up to `timeout_seconds` (< 0: forever) for `call`; *done is 1 when
 * it completed, and the return value is then the call's result. */
SHARDPS_DLL int ShardpsCallWait(ShardpsCallHandle call, double timeout_seconds, int* done);
/* Frees a call; waits for it first if it has not completed (its buffers
 * are borrowed until then). */
SHARDPS_DLL int ShardpsCallFree(ShardpsCallHandle call);

/* Rows of sparse table `table` by id: `n` int64 ids, and n * dim floats of
 * gradients or of pulled rows (row i for ids[i]; a repeated id's gradients
 * are summed before they leave, its row copied to each place it appears).
 * Pushes go to the servers that hold each id, one request per server (sync:
 * to every server, so that the step completes everywhere); pulls of step t
 * wait as ShardpsPull does. */
SHARDPS_DLL int ShardpsPushRows(ShardpsClientHandle client, int64_t step, int table, int64_t n,
                                const int64_t* ids, const float* grads);
SHARDPS_DLL int ShardpsPullRows(ShardpsClientHandle client, int64_t step, int table, int64_t n,
                                const int64_t* ids, float* rows);
SHARDPS_DLL int ShardpsPushRowsAsync(ShardpsClientHandle client, int64_t step, int table, int64_t n,
                                     const int64_t* ids, const float* grads, ShardpsCallHandle* call);
SHARDPS_DLL int ShardpsPullRowsAsync(ShardpsClientHandle client, int64_t step, int table, int64_t n,
                                     const int64_t* ids, float* rows, ShardpsCallHandle* call);

/* Several tables' rows in one call, as a model with many embedding tables
 * moves them each step: `count` transfers, the i-th of ns[i] ids of table
 * tables[i] (ids[i], and grads[i] or rows[i], as above). Every transfer is
 * checked before any starts; *call completes when all have, with the first
 * error if any. */
SHARDPS_DLL int ShardpsPushRowsManyAsync(ShardpsClientHandle client, int64_t step, int count, const int* tables,
                                         const int64_t* ns, const int64_t* const* ids, const float* const* grads,
                                         ShardpsCallHandle* call);
SHARDPS_DLL int ShardpsPullRowsManyAsync(ShardpsClientHandle client, int64_t step, int count, const int* tables,
                                         const int64_t* ns, const int64_t* const* ids, float* const* rows,
                                         ShardpsCallHandle* call);

/* The client's counters: retries, registrations, rewinds it sent. */
SHARDPS_DLL int ShardpsClientStats(ShardpsClientHandle client, int64_t* retries, int64_t* registrations,
                                   int64_t* rewinds);

#endif /* SHARDPS_CLIENT_C_API_H_ */
