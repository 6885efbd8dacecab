"""The arena: a variant's report card against the published field (`python -m linarena.arena
attention=<name>`): its certificate (the generic checks, one row each), its cost beside softmax
and elu+1, and its accuracy and recall under the published protocols, compared with the
committed runs. Built on analysis/ and studies/, which never import it."""
