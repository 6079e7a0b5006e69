"""`python -m corral`: how `corral up` starts its controller and workers with the same interpreter."""

from corral.cli.main import main

if __name__ == "__main__":
    main(prog_name="corral")
