/* Warden-shaped entry points for a statically linked CPython 3.13 reactor (the proof's
 * own code, written for this proof).
 *
 * Exports, as Warden's host uses them today:
 *   host_alloc(len) -> ptr          guest memory for `len` bytes (malloc; `turn` frees it)
 *   turn(ptr, len) -> i32           run UTF-8 source in __main__; 0 = ran, 1 = raised,
 *                                   SystemExit(n) = n (the instance lives on)
 *   run() -> i32                    `python ARGV...` with the WASI argv (fresh instance only)
 *   shutdown() -> i32               Py_FinalizeEx
 *   wizer.initialize()              Py_Initialize, then forget preopens (snapshot point)
 *   warden_reset_preopens()         wasi-libc's preopen reset, for a host-driven snapshot
 * Import:
 *   host.call(ptr, len, out_ptr, out_len) -> i32   the door; reached from Python as
 *                                                  `_host.call(bytes) -> bytes`
 * Builtin modules added to the inittab: `_host`, and the extensions of build.sh's step 6
 * under the names their packages import them by: `pydantic_core._pydantic_core`,
 * `jiter.jiter`, `rpds.rpds`, `orjson.orjson`; and the C extensions of step 7,
 * `markupsafe._speedups` and `msgpack._cmsgpack`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <wasi/api.h>
#include <wasi/libc.h>

#define EXPORT(name) __attribute__((export_name(name)))

__attribute__((import_module("host"), import_name("call")))
extern int32_t host_call(int32_t ptr, int32_t len, int32_t out_ptr, int32_t out_len);

extern PyObject *PyInit__pydantic_core(void);
extern PyObject *PyInit_jiter(void);
extern PyObject *PyInit_rpds(void);
extern PyObject *PyInit_orjson(void);
extern PyObject *PyInit__speedups(void);
extern PyObject *PyInit__cmsgpack(void);

/* wasi-libc defines this in every version used here, but trixie's (2024-12) does not declare it. */
void __wasilibc_reset_preopens(void);

/* ---- the `_host` module: Python's side of the door ---- */

static PyObject *host_call_py(PyObject *self, PyObject *arg) {
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t out_ptr = 0, out_len = 0;
    int32_t rc = host_call((int32_t)(uintptr_t)buf.buf, (int32_t)buf.len,
                           (int32_t)(uintptr_t)&out_ptr, (int32_t)(uintptr_t)&out_len);
    PyBuffer_Release(&buf);
    /* As today's runtime: no host bound (-1) is ConnectionRefusedError, a fault OSError. */
    if (rc == -1) return PyErr_Format(PyExc_ConnectionRefusedError, "no host answers the door");
    if (rc != 0) return PyErr_Format(PyExc_OSError, "host.call returned %d", (int)rc);
    PyObject *r = PyBytes_FromStringAndSize((const char *)(uintptr_t)out_ptr, out_len);
    free((void *)(uintptr_t)out_ptr); /* the host wrote its answer into host_alloc memory */
    return r;
}

static PyObject *host_available_py(PyObject *self, PyObject *unused) {
    uint32_t out_ptr = 0, out_len = 0;
    /* A zero-length frame: -1 means no host is bound. */
    int32_t rc = host_call(0, 0, (int32_t)(uintptr_t)&out_ptr, (int32_t)(uintptr_t)&out_len);
    if (rc == 0 && out_ptr) free((void *)(uintptr_t)out_ptr);
    return PyBool_FromLong(rc != -1);
}

static PyMethodDef host_methods[] = {
    {"call", host_call_py, METH_O, "Send one frame through host.call; returns the answer."},
    {"available", host_available_py, METH_NOARGS, "Whether a host answers host.call."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef host_module = {
    PyModuleDef_HEAD_INIT, "_host", "Warden's door to the host.", -1, host_methods,
};

static PyObject *PyInit__host(void) { return PyModule_Create(&host_module); }

/* ---- interpreter set-up ---- */

static int initialized = 0;

static void add_inittab(void) {
    static int added = 0;
    if (added) return;
    PyImport_AppendInittab("_host", PyInit__host);
    PyImport_AppendInittab("pydantic_core._pydantic_core", PyInit__pydantic_core);
    PyImport_AppendInittab("jiter.jiter", PyInit_jiter);
    PyImport_AppendInittab("rpds.rpds", PyInit_rpds);
    PyImport_AppendInittab("orjson.orjson", PyInit_orjson);
    PyImport_AppendInittab("markupsafe._speedups", PyInit__speedups);
    PyImport_AppendInittab("msgpack._cmsgpack", PyInit__cmsgpack);
    added = 1;
}

/* The WASI argv, as C strings (leaked: lives as long as the instance). */
static int wasi_argv(char ***out) {
    __wasi_size_t argc = 0, size = 0;
    if (__wasi_args_sizes_get(&argc, &size) != 0 || argc == 0) {
        static char *fallback[] = {"python", NULL};
        *out = fallback;
        return 1;
    }
    char **argv = calloc(argc + 1, sizeof(char *));
    char *buf = malloc(size);
    if (!argv || !buf || __wasi_args_get((uint8_t **)argv, (uint8_t *)buf) != 0) {
        static char *fallback[] = {"python", NULL};
        *out = fallback;
        return 1;
    }
    *out = argv;
    return (int)argc;
}

static int init_python(int parse_argv) {
    if (initialized) return 0;
    add_inittab();
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.parse_argv = parse_argv;
    config.install_signal_handlers = 0;
    char **argv;
    int argc = wasi_argv(&argv);
    PyStatus st;
    if (parse_argv) {
        st = PyConfig_SetBytesArgv(&config, argc, argv);
    } else {
        /* a turn-driven instance: sys.argv == [''] (as today's runtime); argv[0] still
         * names the program, from which getpath finds the prefix */
        st = PyConfig_SetBytesString(&config, &config.program_name, argv[0]);
        if (!PyStatus_Exception(st)) {
            char *empty[] = {"", NULL};
            st = PyConfig_SetBytesArgv(&config, 1, empty);
        }
    }
    if (PyStatus_Exception(st)) goto fail;
    st = Py_InitializeFromConfig(&config);
    if (PyStatus_Exception(st)) goto fail;
    PyConfig_Clear(&config);
    initialized = 1;
    return 0;
fail:
    PyConfig_Clear(&config);
    if (PyStatus_IsExit(st)) return st.exitcode;
    Py_ExitStatusException(st); /* prints and exits */
    return 1;
}

static void flush_std(void) {
    PyObject *exc = PyErr_GetRaisedException();
    const char *names[] = {"stdout", "stderr"};
    for (int i = 0; i < 2; i++) {
        PyObject *f = PySys_GetObject(names[i]); /* borrowed */
        if (f && f != Py_None) {
            PyObject *r = PyObject_CallMethod(f, "flush", NULL);
            if (r) Py_DECREF(r); else PyErr_Clear();
        }
    }
    PyErr_SetRaisedException(exc);
}

/* ---- exports ---- */

EXPORT("host_alloc") int32_t host_alloc(int32_t len) {
    return (int32_t)(uintptr_t)malloc(len > 0 ? (size_t)len : 1);
}

/* The exit status a SystemExit asks for, as CPython's own handling computes it (None: 0,
 * an int: that int, anything else: printed to stderr, 1). Clears the exception. */
static int32_t system_exit_status(void) {
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *code = PyObject_GetAttrString(exc, "code");
    int32_t status = 1;
    if (code == NULL) {
        PyErr_Clear();
    } else if (code == Py_None) {
        status = 0;
    } else if (PyLong_Check(code)) {
        status = (int32_t)PyLong_AsLong(code);
        if (PyErr_Occurred()) { PyErr_Clear(); status = 1; }
    } else {
        PyObject *err = PySys_GetObject("stderr"); /* borrowed */
        if (err && err != Py_None && PyFile_WriteObject(code, err, Py_PRINT_RAW) == 0)
            PyFile_WriteString("\n", err);
        PyErr_Clear();
    }
    Py_XDECREF(code);
    Py_DECREF(exc);
    return status;
}

static unsigned long turn_count = 0;

/* Runs one turn. Returns 0 when the source ran, 1 when it raised (the traceback is on
 * stderr), and a SystemExit's status without ending the instance, as today's runtime does.
 * The source's file name is "<turn N>", as in today's runtime. */
EXPORT("turn") int32_t turn(int32_t ptr, int32_t len) {
    if (init_python(0) != 0) return 2;
    char *src = malloc((size_t)len + 1);
    if (!src) return 3;
    memcpy(src, (const void *)(uintptr_t)ptr, (size_t)len);
    src[len] = '\0';
    free((void *)(uintptr_t)ptr);
    char filename[32];
    snprintf(filename, sizeof filename, "<turn %lu>", ++turn_count);
    PyObject *main_mod = PyImport_AddModule("__main__"); /* borrowed */
    PyObject *globals = PyModule_GetDict(main_mod);
    PyObject *r = NULL;
    PyObject *code = Py_CompileString(src, filename, Py_file_input);
    free(src);
    if (code) {
        r = PyEval_EvalCode(code, globals, globals);
        Py_DECREF(code);
    }
    int32_t rc = 0;
    if (r == NULL) {
        if (PyErr_ExceptionMatches(PyExc_SystemExit)) {
            rc = system_exit_status();
        } else {
            PyErr_Print();
            rc = 1;
        }
    } else {
        Py_DECREF(r);
    }
    flush_std();
    return rc;
}

EXPORT("run") int32_t run(void) {
    if (initialized) return -1; /* `run` is for a fresh (not pre-initialized) instance */
    int rc = init_python(1);
    if (rc != 0) return rc;
    return Py_RunMain();
}

EXPORT("shutdown") int32_t shutdown_py(void) {
    if (!initialized) return 0;
    flush_std();
    int rc = Py_FinalizeEx();
    initialized = 0;
    return rc;
}

EXPORT("warden_reset_preopens") void warden_reset_preopens(void) {
    __wasilibc_reset_preopens();
}

EXPORT("wizer.initialize") void wizer_initialize(void) {
    init_python(0);
}
