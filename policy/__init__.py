"""The CrossGuard policy pack (`pulumi preview --policy-pack policy`) and its rules (`make policy`)."""
