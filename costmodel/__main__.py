from costmodel.cli import main

main(prog_name="costmodel")
