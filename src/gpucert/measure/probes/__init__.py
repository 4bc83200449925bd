"""Node-side measurements, one module each. Only this room imports cupy or pynvml or runs dcgmi, lazily."""
