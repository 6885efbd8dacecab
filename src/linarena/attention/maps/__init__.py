"""Built-in feature maps, one per file. A config names a map by its module path, e.g.
`linarena.attention.maps.taylor.TaylorFeatures`."""
