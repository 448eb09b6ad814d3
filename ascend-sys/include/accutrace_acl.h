/*
 * accutrace_acl.h: the subset of CANN's AscendCL C ABI that accutrace touches.
 *
 * Written for accutrace from the public CANN documentation and headers (acl_base.h, acl_rt.h, acl_mdl.h,
 * acl_op.h, acl_dump.h); see docs/CANN.md sections 3 and 5 and its Grounding table. Only declarations are
 * here: the definitions come from a real libascendcl.so / libacl_rt.so / libascend_dump.so, or from the
 * simulated runtime in tests/sim-runtime.
 *
 * Regenerate ascend-sys/src/bindings.rs after editing: scripts/regen-bindings (needs libclang).
 */
#ifndef ACCUTRACE_ACL_H_
#define ACCUTRACE_ACL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- base types (acl_base.h) ---- */
typedef int aclError;
typedef void *aclrtStream;
/* Model input/output sets and the buffers in them: opaque handles made and read through the functions below. */
typedef struct aclmdlDataset aclmdlDataset;
typedef struct aclDataBuffer aclDataBuffer;

/* ---- error codes (acl_base.h, public values) ---- */
static const int ACL_SUCCESS = 0;
static const int ACL_ERROR_NONE = 0;
static const int ACL_ERROR_INVALID_PARAM = 100000;
static const int ACL_ERROR_UNINITIALIZE = 100001;
static const int ACL_ERROR_REPEAT_INITIALIZE = 100002;
static const int ACL_ERROR_INVALID_FILE = 100003;
static const int ACL_ERROR_WRITE_FILE = 100004;
static const int ACL_ERROR_INVALID_FILE_SIZE = 100005;
static const int ACL_ERROR_PARSE_FILE = 100006;
static const int ACL_ERROR_INVALID_DUMP_CONFIG = 100009;
static const int ACL_ERROR_INVALID_MODEL_ID = 100011;
static const int ACL_ERROR_PARSE_MODEL = 100013;
static const int ACL_ERROR_READ_MODEL_FAILURE = 100014;
static const int ACL_ERROR_OP_INPUT_NOT_MATCH = 100021;
static const int ACL_ERROR_OP_OUTPUT_NOT_MATCH = 100022;
static const int ACL_ERROR_REPEAT_FINALIZE = 100037;
static const int ACL_ERROR_DUMP_ALREADY_RUN = 100044;
static const int ACL_ERROR_DUMP_NOT_RUN = 100045;
static const int ACL_ERROR_BAD_ALLOC = 200000;
static const int ACL_ERROR_API_NOT_SUPPORT = 200001;
static const int ACL_ERROR_INVALID_DEVICE = 200002;
static const int ACL_ERROR_INTERNAL_ERROR = 500000;
static const int ACL_ERROR_FAILURE = 500001;

/* ---- runtime: device, overflow (acl_rt.h) ---- */
typedef enum aclrtFloatOverflowMode {
    ACL_RT_OVERFLOW_MODE_SATURATION = 0, /* inf -> +-max, NaN -> 0 */
    ACL_RT_OVERFLOW_MODE_INFNAN = 1,     /* IEEE 754 inf/NaN */
    ACL_RT_OVERFLOW_MODE_UNDEF = 2,
} aclrtFloatOverflowMode;

aclError aclInit(const char *configPath);
aclError aclFinalize(void);
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtSynchronizeDevice(void);
aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode);
aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode);

/* ---- runtime: context options (acl_rt.h) ---- */
typedef enum aclSysParamOpt {
    ACL_OPT_DETERMINISTIC = 0,       /* 1: reductions in a fixed order, results reproducible (default 0) */
    ACL_OPT_ENABLE_DEBUG_KERNEL = 1,
} aclSysParamOpt;

aclError aclrtCtxSetSysParamOpt(aclSysParamOpt opt, int64_t value);
aclError aclrtCtxGetSysParamOpt(aclSysParamOpt opt, int64_t *value);
/* Asynchronous: queues a copy of the device's overflow status into outputAddr, which is DEVICE memory
 * (aclrtMalloc) of 64 bytes; synchronize the stream, then aclrtMemcpy it to the host. */
aclError aclrtGetOverflowStatus(void *outputAddr, size_t outputSize, aclrtStream stream);
aclError aclrtResetOverflowStatus(aclrtStream stream);

/* ---- device memory (acl_rt.h) ---- */
typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST = 0,
    ACL_MEM_MALLOC_HUGE_ONLY = 1,
    ACL_MEM_MALLOC_NORMAL_ONLY = 2,
} aclrtMemMallocPolicy;

typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
} aclrtMemcpyKind;

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void *devPtr);
/* Copies count bytes; destMax is the room at dst (count > destMax is an error). Synchronous. */
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind);
/* Waits until every task queued on stream (NULL: the default stream) has finished. */
aclError aclrtSynchronizeStream(aclrtStream stream);

/* ---- models (acl_mdl.h) ---- */
aclmdlDataset *aclmdlCreateDataset(void);
aclError aclmdlDestroyDataset(const aclmdlDataset *dataset);
aclError aclmdlAddDatasetBuffer(aclmdlDataset *dataset, aclDataBuffer *dataBuffer);
size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset *dataset);
aclDataBuffer *aclmdlGetDatasetBuffer(const aclmdlDataset *dataset, size_t index);
/* A view of size bytes at data (device memory); destroying it does not free the memory. */
aclDataBuffer *aclCreateDataBuffer(void *data, size_t size);
aclError aclDestroyDataBuffer(const aclDataBuffer *dataBuffer);
void *aclGetDataBufferAddr(const aclDataBuffer *dataBuffer);
size_t aclGetDataBufferSizeV2(const aclDataBuffer *dataBuffer);

aclError aclmdlLoadFromFile(const char *modelPath, uint32_t *modelId);
aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output);
aclError aclmdlUnload(uint32_t modelId);

/* ---- single-operator execution (acl_base.h, acl_op.h) ----
 * The generic single-op path (torch_npu's OpCommand): describe each operand, hand its device memory over as
 * a data buffer, and launch the op by type. Operand shapes are the framework's (origin) shapes; a tensor
 * stored in another device format also gets its storage format and shape. */
typedef struct aclTensorDesc aclTensorDesc;
typedef struct aclopAttr aclopAttr;

/* aclDataType numbers types differently from the dump's OutputDataType (the runtime converts). */
typedef enum aclDataType {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_BF16 = 27,
} aclDataType;

typedef enum aclFormat {
    ACL_FORMAT_UNDEFINED = -1,
    ACL_FORMAT_NCHW = 0,
    ACL_FORMAT_NHWC = 1,
    ACL_FORMAT_ND = 2,
    ACL_FORMAT_NC1HWC0 = 3,
    ACL_FORMAT_FRACTAL_Z = 4,
    ACL_FORMAT_FRACTAL_NZ = 29,
} aclFormat;

aclTensorDesc *aclCreateTensorDesc(aclDataType dataType, int numDims, const int64_t *dims, aclFormat format);
void aclDestroyTensorDesc(const aclTensorDesc *desc);
aclError aclSetTensorStorageFormat(aclTensorDesc *desc, aclFormat format);
aclError aclSetTensorStorageShape(aclTensorDesc *desc, int numDims, const int64_t *dims);
aclopAttr *aclopCreateAttr(void);
void aclopDestroyAttr(const aclopAttr *attr);
aclError aclopSetAttrInt(aclopAttr *attr, const char *attrName, int64_t attrValue);
aclError aclopSetAttrString(aclopAttr *attr, const char *attrName, const char *attrValue);
/* Launches op opType on stream (NULL: the default stream); asynchronous. attr may be NULL. */
aclError aclopExecuteV2(const char *opType, int numInputs, aclTensorDesc *inputDesc[], aclDataBuffer *inputs[],
                        int numOutputs, aclTensorDesc *outputDesc[], aclDataBuffer *outputs[], aclopAttr *attr,
                        aclrtStream stream);
/* Deprecated (use aclopExecuteV2): the same launch with const arrays; the output descriptions are not
 * updated. */
aclError aclopExecute(const char *opType, int numInputs, const aclTensorDesc *const inputDesc[],
                      const aclDataBuffer *const inputs[], int numOutputs, const aclTensorDesc *const outputDesc[],
                      aclDataBuffer *const outputs[], const aclopAttr *attr, aclrtStream stream);

/* A single-op model matched once for its type, descriptions and attributes (acl_op.h): launching by handle
 * skips the per-call match. The handle keeps what it needs; the descriptions and attribute may be destroyed
 * after aclopCreateHandle. */
typedef struct aclopHandle aclopHandle;
aclError aclopCreateHandle(const char *opType, int numInputs, const aclTensorDesc *const inputDesc[], int numOutputs,
                           const aclTensorDesc *const outputDesc[], const aclopAttr *opAttr, aclopHandle **handle);
void aclopDestroyHandle(aclopHandle *handle);
/* Launches the handle's op on these buffers (as many as the handle's descriptions, else
 * ACL_ERROR_OP_INPUT_NOT_MATCH / ACL_ERROR_OP_OUTPUT_NOT_MATCH); asynchronous, as aclopExecuteV2. */
aclError aclopExecWithHandle(aclopHandle *handle, int numInputs, const aclDataBuffer *const inputs[], int numOutputs,
                             aclDataBuffer *const outputs[], aclrtStream stream);

/* ---- compile and execute (acl_op.h, acl_op_compiler.h; the vendor's libacl_op_compiler.so) ----
 * torch_npu's usual eager launch (OpCommand): the op is compiled for its operands when no compiled form is
 * cached, then launched as aclopExecuteV2 launches it. */
typedef enum aclEngineType {
    ACL_ENGINE_SYS,
    ACL_ENGINE_AICORE,
    ACL_ENGINE_VECTOR,
} aclopEngineType;

typedef enum aclCompileType { ACL_COMPILE_SYS, ACL_COMPILE_UNREGISTERED } aclopCompileType;

/* opPath names the op's implementation for ACL_COMPILE_UNREGISTERED (may be NULL for ACL_COMPILE_SYS). */
aclError aclopCompileAndExecute(const char *opType, int numInputs, const aclTensorDesc *const inputDesc[],
                                const aclDataBuffer *const inputs[], int numOutputs,
                                const aclTensorDesc *const outputDesc[], aclDataBuffer *const outputs[],
                                const aclopAttr *attr, aclopEngineType engineType, aclopCompileType compileFlag,
                                const char *opPath, aclrtStream stream);
/* As aclopCompileAndExecute; the output descriptions may be updated with the shapes the op produced. */
aclError aclopCompileAndExecuteV2(const char *opType, int numInputs, aclTensorDesc *inputDesc[],
                                  aclDataBuffer *inputs[], int numOutputs, aclTensorDesc *outputDesc[],
                                  aclDataBuffer *outputs[], aclopAttr *attr, aclopEngineType engineType,
                                  aclopCompileType compileFlag, const char *opPath, aclrtStream stream);

/* ---- dump (acl_mdl.h, acl_dump.h) ---- */
aclError aclmdlInitDump(void);
aclError aclmdlSetDump(const char *dumpCfgPath);
aclError aclmdlFinalizeDump(void);

#define ACL_DUMP_MAX_FILE_PATH_LENGTH 4096

/* One slice of a dump file handed to a registered callback. LP64 layout: fileName at 0, bufLen at 4096,
 * isLastChunk at 4100, offset at 4104, flag at 4112, dataBuf at 4116, sizeof 4120 (4 bytes of tail padding
 * from offset's 8-byte alignment). The callback's len argument is sizeof(acldumpChunk) + bufLen. */
typedef struct acldumpChunk {
    char fileName[ACL_DUMP_MAX_FILE_PATH_LENGTH]; /* path the file would have had on disk, NUL-terminated */
    uint32_t bufLen;                              /* bytes in dataBuf */
    uint32_t isLastChunk;                         /* 1 on the final chunk of this file */
    int64_t offset;                               /* -1: append */
    int32_t flag;                                 /* reserved */
    uint8_t dataBuf[];                            /* bufLen bytes follow */
} acldumpChunk;

typedef int32_t (*acldumpCallback)(const acldumpChunk *chunk, int32_t len);

aclError acldumpRegCallback(int32_t (*messageCallback)(const acldumpChunk *chunk, int32_t len), int32_t flag);
void acldumpUnregCallback(void);

#ifdef __cplusplus
}
#endif

#endif /* ACCUTRACE_ACL_H_ */
