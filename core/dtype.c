/*
 * dtype.c — public dtype/op helpers (sizes, names, parsing) and bulk half-precision conversion.
 */
#include "config.h"

#include "core/tempo_int.h"
#include "core/dtype.h"

#include <strings.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[TEMPO_DTYPE_COUNT] = {
    [TEMPO_INT8] = {"int8", 1},       [TEMPO_UINT8] = {"uint8", 1},
    [TEMPO_INT32] = {"int32", 4},     [TEMPO_UINT32] = {"uint32", 4},
    [TEMPO_INT64] = {"int64", 8},     [TEMPO_UINT64] = {"uint64", 8},
    [TEMPO_FLOAT16] = {"float16", 2}, [TEMPO_BFLOAT16] = {"bfloat16", 2},
    [TEMPO_FLOAT32] = {"float32", 4}, [TEMPO_FLOAT64] = {"float64", 8},
};

static const char *const op_names[TEMPO_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

size_t tempo_dtype_size(tempo_dtype_t dtype)
{
    return tempo__dtype_valid(dtype) ? dtypes[dtype].size : 0;
}

const char *tempo_dtype_name(tempo_dtype_t dtype)
{
    return tempo__dtype_valid(dtype) ? dtypes[dtype].name : "invalid";
}

const char *tempo_op_name(tempo_op_t op)
{
    return tempo__op_valid(op) ? op_names[op] : "invalid";
}

tempo_status_t tempo_dtype_parse(const char *name, tempo_dtype_t *dtype_p)
{
    static const struct {
        const char *alias;
        tempo_dtype_t dtype;
    } aliases[] = {
        {"half", TEMPO_FLOAT16},  {"fp16", TEMPO_FLOAT16},   {"f16", TEMPO_FLOAT16},
        {"bf16", TEMPO_BFLOAT16}, {"float", TEMPO_FLOAT32},  {"fp32", TEMPO_FLOAT32},
        {"f32", TEMPO_FLOAT32},   {"double", TEMPO_FLOAT64}, {"fp64", TEMPO_FLOAT64},
        {"f64", TEMPO_FLOAT64},   {"char", TEMPO_INT8},      {"int", TEMPO_INT32},
        {"uint", TEMPO_UINT32},
    };
    if (!name || !dtype_p) {
        return TEMPO_ERR_INVALID;
    }
    for (int d = 0; d < TEMPO_DTYPE_COUNT; d++) {
        if (strcasecmp(name, dtypes[d].name) == 0) {
            *dtype_p = (tempo_dtype_t)d;
            return TEMPO_OK;
        }
    }
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(aliases); i++) {
        if (strcasecmp(name, aliases[i].alias) == 0) {
            *dtype_p = aliases[i].dtype;
            return TEMPO_OK;
        }
    }
    return TEMPO_ERR_INVALID;
}

tempo_status_t tempo_op_parse(const char *name, tempo_op_t *op_p)
{
    if (!name || !op_p) {
        return TEMPO_ERR_INVALID;
    }
    for (int o = 0; o < TEMPO_OP_COUNT; o++) {
        if (strcasecmp(name, op_names[o]) == 0) {
            *op_p = (tempo_op_t)o;
            return TEMPO_OK;
        }
    }
    return TEMPO_ERR_INVALID;
}

void tempo__half_to_f32(tempo_dtype_t dtype, const uint16_t *src, float *dst, size_t n)
{
    tempo__half_to_f32_loop(dtype, src, dst, n);
}

void tempo__f32_to_half(tempo_dtype_t dtype, const float *src, uint16_t *dst, size_t n)
{
    tempo__f32_to_half_loop(dtype, src, dst, n);
}
