"""What tf2onnx lacks for kformer's graphs, registered before a conversion (:func:`register`).

``XlaDynamicUpdateSlice`` -- how Keras' ``ops.slice_update`` runs on TensorFlow, and so how
KerasHub's cached attention writes one position's keys and values into the cache -- has no
tf2onnx handler. Here it becomes standard ONNX: the update padded to the operand's shape at its
start indices (``Pad``), and ``Where`` a padded mask of ones picks it over the operand. Exact (no
arithmetic on the values); the start indices must keep the update inside the operand, as
kformer's decoding always does (XLA would clamp them).
"""

from __future__ import annotations

_REGISTERED = False


def register() -> None:
    """Register the handlers with tf2onnx (once per process)."""
    global _REGISTERED
    if _REGISTERED:
        return
    import numpy as np
    from onnx import TensorProto, numpy_helper
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    @tf_op("XlaDynamicUpdateSlice")
    class DynamicUpdateSlice:  # noqa: F841  (registered by the decorator)
        @classmethod
        def version_11(cls, ctx, node, **kwargs):
            operand, update, starts = node.input
            starts = ctx.make_node("Cast", [starts], attr={"to": TensorProto.INT64}).output[0]
            update_shape = ctx.make_node("Shape", [update]).output[0]
            operand_shape = ctx.make_node("Shape", [operand]).output[0]
            ends = ctx.make_node("Sub", [ctx.make_node("Sub", [operand_shape, starts]).output[0], update_shape]).output[0]
            pads = ctx.make_node("Concat", [starts, ends], attr={"axis": 0}).output[0]
            padded = ctx.make_node("Pad", [update, pads]).output[0]
            one = numpy_helper.from_array(np.array([1.0], dtype="float32"))
            ones = ctx.make_node("ConstantOfShape", [update_shape], attr={"value": one}).output[0]
            half = ctx.make_const(utils.make_name("half"), np.array(0.5, dtype="float32")).output[0]
            mask = ctx.make_node("Greater", [ctx.make_node("Pad", [ones, pads]).output[0], half]).output[0]
            node.type = "Where"
            ctx.replace_inputs(node, [mask, padded, operand])

    _REGISTERED = True
