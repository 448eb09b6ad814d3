"""Launching ops as torch_npu does in eager mode: operands copied into device memory, described, and
handed to aclopExecuteV2. The runtime is the simulated libascendcl.so named by SIM_ACL_LIB, loaded into the
global scope; functions are looked up there, where a preloaded collector's aclInit comes first."""

import ctypes
import os
import struct

ACL_FLOAT = 0
ACL_FORMAT_ND = 2
ACL_MEMCPY_HOST_TO_DEVICE = 1

_lib = None


def _fn(name, restype, *argtypes):
    f = getattr(ctypes.CDLL(None), name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


def _check(what, code):
    if code != 0:
        raise RuntimeError(f"{what} returned {code}")


def init():
    global _lib
    _lib = ctypes.CDLL(os.environ["SIM_ACL_LIB"], mode=ctypes.RTLD_GLOBAL)
    _check("aclInit", _fn("aclInit", ctypes.c_int, ctypes.c_char_p)(None))
    _check("aclrtSetDevice", _fn("aclrtSetDevice", ctypes.c_int, ctypes.c_int)(0))


def finalize():
    _check("aclrtResetDevice", _fn("aclrtResetDevice", ctypes.c_int, ctypes.c_int)(0))
    _check("aclFinalize", _fn("aclFinalize", ctypes.c_int)())


def _operand(values):
    data = struct.pack(f"<{len(values)}f", *values)
    memory = ctypes.c_void_p()
    malloc = _fn("aclrtMalloc", ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_int)
    _check("aclrtMalloc", malloc(ctypes.byref(memory), len(data), 0))
    memcpy = _fn("aclrtMemcpy", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                 ctypes.c_size_t, ctypes.c_int)
    _check("aclrtMemcpy", memcpy(memory, len(data), data, len(data), ACL_MEMCPY_HOST_TO_DEVICE))
    dims = (ctypes.c_int64 * 1)(len(values))
    desc = _fn("aclCreateTensorDesc", ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
               ctypes.POINTER(ctypes.c_int64), ctypes.c_int)(ACL_FLOAT, 1, dims, ACL_FORMAT_ND)
    buffer = _fn("aclCreateDataBuffer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(memory, len(data))
    return memory, desc, buffer


def launch(op_type, inputs, outputs):
    ins = [_operand(v) for v in inputs]
    outs = [_operand(v) for v in outputs]
    array = lambda items: (ctypes.c_void_p * max(len(items), 1))(*items)
    execute = _fn("aclopExecuteV2", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    code = execute(op_type.encode(), len(ins), array([d for _, d, _ in ins]), array([b for _, _, b in ins]),
                   len(outs), array([d for _, d, _ in outs]), array([b for _, _, b in outs]), None, None)
    _check(f"aclopExecuteV2({op_type})", code)
    for memory, desc, buffer in ins + outs:
        _fn("aclDestroyTensorDesc", None, ctypes.c_void_p)(desc)
        _fn("aclDestroyDataBuffer", ctypes.c_int, ctypes.c_void_p)(buffer)
        _fn("aclrtFree", ctypes.c_int, ctypes.c_void_p)(memory)
