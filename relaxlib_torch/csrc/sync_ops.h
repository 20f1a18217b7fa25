// The synchronous collectives of the torch glue, shared by the torch.ops registration (ops.cc) and
// the direct Python bindings (python_bindings.cc).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace relaxlib_torch {

// Called between the slices of a synchronous wait; throws to abandon the wait (the Python
// bindings install one that raises a pending KeyboardInterrupt). Null: wait without slices' checks.
using InterruptCheck = void (*)();
void set_interrupt_check(InterruptCheck check);

// Reduces `input` over the process set into `output` (which may be `input`); returns when done.
void allreduce_sync(const at::Tensor& input, const at::Tensor& output, const std::string& name, int64_t op,
                    double prescale, double postscale, int64_t process_set);

// Concatenates every member's `input` along the first dimension; returns the new tensor.
at::Tensor allgather_sync(const at::Tensor& input, const std::string& name, int64_t process_set);

// Reduces `input` over the process set and returns this member's block of the first dimension.
at::Tensor reducescatter_sync(const at::Tensor& input, const std::string& name, int64_t op, double prescale,
                              double postscale, int64_t process_set);

}  // namespace relaxlib_torch
