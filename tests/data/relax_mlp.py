"""A two-layer MLP head as a Relax module: the whole-model test's input."""
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class MLP:
    @R.function
    def main(x: R.Tensor((32, 64), "float32"), w: R.Tensor((64, 64), "float32"),
             b: R.Tensor((64,), "float32")) -> R.Tensor((32, 64), "float32"):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.add(y, b)
            h = R.nn.relu(z)
            o = R.nn.softmax(h, axis=-1)
            R.output(o)
        return o
