"""`phantom sweep`: run one script at many layouts under simulation and rank them."""
