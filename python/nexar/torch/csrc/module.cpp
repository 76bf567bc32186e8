// The Python module nexar.torch._C: the ProcessGroupNexar type and the
// creator torch.distributed calls (Backend.register_backend's signature:
// store, group rank, group size, timeout).
#include "nexar_pg.hpp"

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace {

c10::intrusive_ptr<nexar_torch::ProcessGroupNexar>
create(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
       std::chrono::milliseconds timeout) {
  TORCH_CHECK(size > 0 && rank >= 0 && rank < size, "nexar: rank ", rank, " is outside a group of ",
              size);
  return c10::make_intrusive<nexar_torch::ProcessGroupNexar>(store, rank, size, timeout);
}

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "The torch.distributed backend \"nexar\" (libnexar under c10d::ProcessGroup).";
  // the base class must be registered (by torch) before ours derives from it
  py::object base = py::module_::import("torch._C._distributed_c10d").attr("ProcessGroup");
  py::class_<nexar_torch::ProcessGroupNexar, c10::intrusive_ptr<nexar_torch::ProcessGroupNexar>>(
      m, "ProcessGroupNexar", base)
      .def(py::init(&create), py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
           "Forms the group's nexar communicator through the c10d store (every rank of the "
           "group calls it). Raises RuntimeError naming the step and libnexar's reason.")
      .def_property_readonly(
          "timeout", [](const nexar_torch::ProcessGroupNexar &pg) { return pg.timeout(); },
          "The group's timeout: every operation's no-progress limit.");
  m.def("create_process_group", &create, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "The creator registered with torch.distributed.Backend.register_backend.");
  m.def(
      "version", []() { return std::string(nexar_version()); }, "libnexar's version.");
}
