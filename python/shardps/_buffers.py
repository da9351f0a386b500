"""The host memory a call lends the library: a tensor's values (_Buffer) or
a table's ids and rows (_Rows), from NumPy arrays or PyTorch tensors, each
checked against what the layout says, converted or staged only when it must
be, and copied back into the caller's value once a pull is done
(`finish()`)."""


def _is_torch(value):
    return type(value).__module__.split(".")[0] == "torch"


class _Buffer:
    """Float32 C-order host memory for one tensor's values: the caller's own
    when it already is such, else a staging copy. `finish()` writes a pulled
    staging copy back to the caller's value."""

    def __init__(self, value, shape, name, pulled):
        self.value, self.finish = value, (lambda: None)
        if _is_torch(value):
            self._from_torch(value, shape, name, pulled)
        else:
            self._from_numpy(value, shape, name, pulled)

    def _from_numpy(self, value, shape, name, pulled):
        import numpy as np
        if not isinstance(value, np.ndarray):
            raise TypeError("tensor '%s': want a NumPy array or a PyTorch tensor, got %s" % (name, type(value).__name__))
        _check_shape(name, tuple(value.shape), shape)
        if value.dtype.kind != "f":
            raise TypeError("tensor '%s' has dtype %s; want a floating dtype" % (name, value.dtype))
        if value.dtype == np.float32 and value.flags["C_CONTIGUOUS"] and (value.flags["WRITEABLE"] or not pulled):
            self.array = value
        else:
            if pulled and not value.flags["WRITEABLE"]:
                raise ValueError("tensor '%s': the array to pull into is read-only" % name)
            self.array = np.ascontiguousarray(value, dtype=np.float32)
            if pulled:
                self.finish = lambda: np.copyto(value, self.array, casting="unsafe")
        self.pointer = self.array.ctypes.data

    def _from_torch(self, value, shape, name, pulled):
        import torch
        _check_shape(name, tuple(value.shape), shape)
        if not value.is_floating_point():
            raise TypeError("tensor '%s' has dtype %s; want a floating dtype" % (name, value.dtype))
        direct = value.device.type == "cpu" and value.dtype == torch.float32 and value.is_contiguous()
        if direct:
            self.tensor = value.detach()
        else:
            pin = value.device.type == "cuda"
            self.tensor = torch.empty(shape, dtype=torch.float32, pin_memory=pin)
            if not pulled:
                self.tensor.copy_(value.detach())
            else:
                self.finish = lambda: value.data.copy_(self.tensor, non_blocking=pin)
        self.pointer = self.tensor.data_ptr()


def _check_shape(name, got, want):
    if got != tuple(want):
        raise ValueError("tensor '%s' has shape %s; the layout says %s" % (name, got, tuple(want)))


class _Rows:
    """Ids (int64) and rows (float32, n x dim) as C-contiguous host memory
    the library may borrow; pulled rows are copied back by finish()."""

    def __init__(self, ids, rows, dim, pulled):
        self.finish = lambda: None
        if _plain_torch(ids, "int64") and _plain_torch(rows, "float32"):
            n = ids.numel()
            if (tuple(rows.shape) == (n, dim)) if pulled else (rows.numel() == n * dim):
                # The common case from shardps.torch: lent by address, no numpy.
                self.ids, self.rows, self.n = ids, rows, n
                self.ids_address, self.rows_address = ids.data_ptr(), rows.data_ptr()
                return
        self._from_numpy(ids, rows, dim, pulled)  # converts, or says what is wrong

    def _from_numpy(self, ids, rows, dim, pulled):
        import numpy as np
        self.ids = _contiguous(ids, np.int64, "ids")
        n = self.ids.size
        if pulled:
            self.rows = _writable_rows(rows, n, dim, self)
        else:
            self.rows = _contiguous(rows, np.float32, "rows")
            if self.rows.size != n * dim:
                raise ValueError("%d ids of dim %d need %d gradient values, got %d" % (n, dim, n * dim,
                                                                                      self.rows.size))
        self.n = n
        # Addresses for the C calls (numpy's .ctypes costs microseconds a
        # time, and a model with many tables asks for many each step).
        self.ids_address = self.ids.__array_interface__["data"][0]
        self.rows_address = self.rows.__array_interface__["data"][0]


def _plain_torch(value, dtype):
    """Whether `value` is a contiguous CPU torch tensor of `dtype` that
    needs no gradient: memory the library may borrow as it is."""
    return (_is_torch(value) and value.device.type == "cpu" and str(value.dtype) == "torch." + dtype
            and value.is_contiguous() and not value.requires_grad)


def _contiguous(value, dtype, what):
    import numpy as np
    if _is_torch(value):
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value, dtype=dtype)


def _writable_rows(out, n, dim, owner):
    import numpy as np
    if _is_torch(out):
        if tuple(out.shape) != (n, dim):
            raise ValueError("rows to pull into have shape %s; want (%d, %d)" % (tuple(out.shape), n, dim))
        if out.device.type == "cpu" and out.dtype == __import__("torch").float32 and out.is_contiguous():
            return out.detach().numpy()
        stage = np.empty((n, dim), dtype=np.float32)
        owner.finish = lambda: out.data.copy_(__import__("torch").from_numpy(stage))
        return stage
    if out.shape != (n, dim) or out.dtype != np.float32 or not out.flags["C_CONTIGUOUS"]:
        raise ValueError("rows to pull into: want a C-contiguous float32 array of shape (%d, %d)" % (n, dim))
    if not out.flags["WRITEABLE"]:
        raise ValueError("rows to pull into: the array is read-only")
    return out
