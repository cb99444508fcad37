/*
 * model_impl: what the files of the CPU model share beyond model.h,
 * private to lib/model/model*.c (the public face is model.h). The forward
 * pass's activations are model_forward.c's; model.c frees them with the
 * model.
 */
#ifndef CA_MODEL_IMPL_H
#define CA_MODEL_IMPL_H

#include "model.h"

void ca_model_acts_free(struct ca_model_acts *a);

#endif
