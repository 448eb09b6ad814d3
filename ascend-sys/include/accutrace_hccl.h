/*
 * accutrace_hccl.h: the subset of HCCL's C ABI (Huawei Collective Communication Library, libhccl.so) that
 * accutrace touches: communicator set-up from a root info, the collectives a data-parallel job calls, and
 * point-to-point send/receive.
 *
 * Written for accutrace from the public HCCL documentation and headers (hccl.h, hccl_types.h); see
 * docs/CANN.md section 6. Only declarations are here: the definitions come from a real libhccl.so, or from
 * the stand-in in tests/sim-hccl.
 *
 * Regenerate ascend-sys/src/hccl_bindings.rs after editing: scripts/regen-bindings (needs libclang).
 */
#ifndef ACCUTRACE_HCCL_H_
#define ACCUTRACE_HCCL_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- types (hccl_types.h) ---- */
typedef enum HcclResult {
    HCCL_SUCCESS = 0,
    HCCL_E_PARA = 1,         /* parameter error */
    HCCL_E_PTR = 2,          /* null pointer */
    HCCL_E_MEMORY = 3,
    HCCL_E_INTERNAL = 4,
    HCCL_E_NOT_SUPPORT = 5,
    HCCL_E_NOT_FOUND = 6,
    HCCL_E_UNAVAIL = 7,
    HCCL_E_SYSCALL = 8,
    HCCL_E_TIMEOUT = 9,
    HCCL_E_OPEN_FILE_FAILURE = 10,
    HCCL_E_TCP_CONNECT = 11,
    HCCL_E_ROCE_CONNECT = 12,
    HCCL_E_TCP_TRANSFER = 13,
    HCCL_E_ROCE_TRANSFER = 14,
    HCCL_E_RUNTIME = 15,
    HCCL_E_DRV = 16,
    HCCL_E_PROFILING = 17,
    HCCL_E_CCE = 18,
    HCCL_E_NETWORK = 19,
    HCCL_E_AGAIN = 20,
    HCCL_E_REMOTE = 21,
} HcclResult;

/* A communicator: opaque, meaningful only inside the process that created it. */
typedef void *HcclComm;

typedef enum HcclReduceOp {
    HCCL_REDUCE_SUM = 0,
    HCCL_REDUCE_PROD = 1,
    HCCL_REDUCE_MAX = 2,
    HCCL_REDUCE_MIN = 3,
} HcclReduceOp;

typedef enum HcclDataType {
    HCCL_DATA_TYPE_INT8 = 0,
    HCCL_DATA_TYPE_INT16 = 1,
    HCCL_DATA_TYPE_INT32 = 2,
    HCCL_DATA_TYPE_FP16 = 3,
    HCCL_DATA_TYPE_FP32 = 4,
    HCCL_DATA_TYPE_INT64 = 5,
    HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7,
    HCCL_DATA_TYPE_UINT16 = 8,
    HCCL_DATA_TYPE_UINT32 = 9,
    HCCL_DATA_TYPE_FP64 = 10,
    HCCL_DATA_TYPE_BFP16 = 11,
    HCCL_DATA_TYPE_INT128 = 12,
    HCCL_DATA_TYPE_HIF8 = 14,
    HCCL_DATA_TYPE_FP8E4M3 = 15,
    HCCL_DATA_TYPE_FP8E5M2 = 16,
    HCCL_DATA_TYPE_FP8E8M0 = 17,
} HcclDataType;

#define HCCL_ROOT_INFO_BYTES 4108
/* Where the members of a communicator meet: created on one rank (HcclGetRootInfo) and handed to every
 * member out of band (the launcher's store); the bytes are the same on every member. */
typedef struct HcclRootInfo {
    char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;

/* A communicator's options (hccl_types.h: buffer size, determinism, name, ...). Incomplete here: accutrace
 * only passes it on, and its layout grows with HCCL versions. */
typedef struct HcclCommConfig HcclCommConfig;

/* The buffer HcclGetCommName fills (hccl_types.h: COMM_NAME_MAX_LENGTH). */
#define COMM_NAME_MAX_LENGTH 128

/* Streams are ACL's (accutrace_acl.h); repeated here so the header stands alone. */
typedef void *aclrtStream;

/* ---- communicators (hccl.h) ---- */
HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo);
HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank, HcclComm *comm);
/* HcclCommInitRootInfo with options; torch_npu prefers it where libhccl.so has it. */
HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                      const HcclCommConfig *config, HcclComm *comm);
HcclResult HcclCommDestroy(HcclComm comm);
HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize);
HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank);
/* commName receives at most COMM_NAME_MAX_LENGTH bytes, NUL included. */
HcclResult HcclGetCommName(HcclComm comm, char *commName);

/* ---- collectives (hccl.h); buffers are device memory, work is queued on stream ---- */
HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType, HcclReduceOp op,
                         HcclComm comm, aclrtStream stream);
HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm,
                         aclrtStream stream);
/* recvBuf holds nRanks * sendCount elements, rank i's contribution at i * sendCount. */
HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType dataType, HcclComm comm,
                         aclrtStream stream);
/* sendBuf holds nRanks * recvCount elements; rank i receives the reduction of part i. */
HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                             HcclReduceOp op, HcclComm comm, aclrtStream stream);
HcclResult HcclBarrier(HcclComm comm, aclrtStream stream);

/* ---- point to point (hccl.h) ---- */
HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank, HcclComm comm,
                    aclrtStream stream);
HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank, HcclComm comm,
                    aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* ACCUTRACE_HCCL_H_ */
